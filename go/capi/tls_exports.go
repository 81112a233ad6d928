package main

/*
#include <stdlib.h>
#include "pgn.h"
*/
import "C"

import (
	"time"

	"github.com/pygrpc-native/pygrpc-native/go/front"
)

// The C API of TLS rotation (pgn_tls_*): the fetcher path to Python
// (front/tlsfetch.go) and the low-level API's swap.

//export pgn_tls_next_fetch
func pgn_tls_next_fetch(waitMs C.int32_t, id *C.uint64_t, fetcher *C.int64_t) C.int {
	rid, source, ok := front.NextFetch(time.Duration(waitMs) * time.Millisecond)
	if !ok {
		return 0
	}
	*id, *fetcher = C.uint64_t(rid), C.int64_t(source)
	return 1
}

//export pgn_tls_fetch_done
func pgn_tls_fetch_done(id C.uint64_t, material C.pgn_bytes, keep C.int32_t) {
	if keep != 0 {
		front.FetchDone(uint64(id), nil)
		return
	}
	front.FetchDone(uint64(id), goBytes(material))
}

//export pgn_tls_update
func pgn_tls_update(h C.int64_t, material C.pgn_bytes, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int { return errorResult(f.UpdateTLS(goBytes(material)), errOut) })
}
