package main

/*
#include "pgn.h"
*/
import "C"

import (
	"unicode/utf8"
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

// textValue is a request metadata value under a text key as grpcio hands
// it to handlers: as it is when it is UTF-8, else read as Latin-1, each
// byte the character of that number (grpcio's cygrpc falls back so, where a
// UTF-8 decoder would leave surrogates that can't be encoded again). Such
// values come from HTTP/1 gateways and proxies, not from gRPC clients.
func textValue(v string) string {
	if utf8.ValidString(v) {
		return v
	}
	b := make([]byte, 0, 2*len(v))
	for i := 0; i < len(v); i++ {
		b = utf8.AppendRune(b, rune(v[i]))
	}
	return string(b)
}
