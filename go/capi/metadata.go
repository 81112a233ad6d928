package main

/*
#include "pgn.h"
*/
import "C"

import (
	"unsafe"

	"google.golang.org/grpc/metadata"
)

// goMetadata copies metadata from C (pgn_metadata: (key, value) pairs in
// the caller's memory, in order). No pairs pointer means no metadata (nil);
// a pointer with count 0 is metadata with no entries.
func goMetadata(m C.pgn_metadata) metadata.MD {
	if m.pairs == nil {
		return nil
	}
	pairs := unsafe.Slice(m.pairs, int(m.count))
	md := make(metadata.MD, len(pairs))
	for _, p := range pairs {
		k := goString(p.key)
		md[k] = append(md[k], goString(p.value))
	}
	return md
}
