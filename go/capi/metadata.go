package main

/*
#include "pgn.h"
*/
import "C"

import (
	"encoding/binary"

	"google.golang.org/grpc/metadata"
)

// decodeMetadata reads metadata as the shim encodes it (PGN_METADATA in
// pgn.h: u32 count, then count times (u32 key length, key, u32 value
// length, value)). The shim builds it from a sequence of (str, str | bytes)
// pairs; a malformed buffer yields what could be read, never a crash.
func decodeMetadata(b C.pgn_bytes) metadata.MD {
	if b.data == nil {
		return nil
	}
	return decodeMetadataBytes(cBytes(b))
}

// decodeMetadataBytes is decodeMetadata on a Go slice (fuzzed). The count
// is only a hint, capped by what the buffer can hold (8 bytes a pair), so a
// corrupt count can't make it allocate more than the buffer's size.
func decodeMetadataBytes(b []byte) metadata.MD {
	if len(b) < 4 {
		return nil
	}
	count := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	md := make(metadata.MD, min(count, len(b)/8))
	next := func() (string, bool) {
		if len(b) < 4 {
			return "", false
		}
		l := int(binary.LittleEndian.Uint32(b))
		if len(b)-4 < l {
			return "", false
		}
		s := string(b[4 : 4+l])
		b = b[4+l:]
		return s, true
	}
	for i := 0; i < count; i++ {
		k, ok1 := next()
		v, ok2 := next()
		if !ok1 || !ok2 {
			break
		}
		md[k] = append(md[k], v)
	}
	return md
}
