package main

/*
#include "pgn.h"
*/
import "C"

import (
	"unsafe"

	"github.com/pygrpc-native/pygrpc-native/go/front"
)

// goMetadata copies metadata from C (pgn_metadata: (key, value) pairs in
// the caller's memory, in order), keeping the order. No pairs pointer means
// no metadata (nil); a pointer with count 0 is metadata with no entries.
func goMetadata(m C.pgn_metadata) front.Metadata {
	if m.pairs == nil {
		return nil
	}
	pairs := unsafe.Slice(m.pairs, int(m.count))
	md := make(front.Metadata, len(pairs))
	for i, p := range pairs {
		md[i] = [2]string{goString(p.key), goString(p.value)}
	}
	return md
}
