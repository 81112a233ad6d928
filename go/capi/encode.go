package main

/*
#include <stdlib.h>
#include "pgn.h"
*/
import "C"

import (
	"encoding/binary"
	"math"
	"sync"
	"unsafe"
)

// encoder writes Go values in the tagged format the C shim turns into
// Python objects (decode_value in _native.c). One format for every result
// that crosses to Python (event batches, call details, metrics) keeps the
// shim to one decoder. All integers are little-endian.
//
//	'N'                  None
//	'T' / 'F'            True / False
//	'i' int64            int
//	'd' float64          float
//	'b' u32 len, bytes   bytes
//	's' u32 len, utf-8   str
//	'k' u32 len, utf-8   str that often repeats (the decoder reuses the
//	                     previous 'k' object when the text is the same)
//	't' u32 n, n values  tuple
//	'l' u32 n, n values  list
//	'm' u32 n, 2n values dict (key, value, key, value, ...)
type encoder struct{ buf []byte }

var encoders = sync.Pool{New: func() any { return &encoder{buf: make([]byte, 0, 4096)} }}

func getEncoder() *encoder { e := encoders.Get().(*encoder); e.buf = e.buf[:0]; return e }

func (e *encoder) u32(n int) { e.buf = binary.LittleEndian.AppendUint32(e.buf, uint32(n)) }

func (e *encoder) none() { e.buf = append(e.buf, 'N') }

func (e *encoder) boolean(b bool) {
	if b {
		e.buf = append(e.buf, 'T')
	} else {
		e.buf = append(e.buf, 'F')
	}
}

func (e *encoder) int(v int64) {
	e.buf = append(e.buf, 'i')
	e.buf = binary.LittleEndian.AppendUint64(e.buf, uint64(v))
}

func (e *encoder) float(v float64) {
	e.buf = append(e.buf, 'd')
	e.buf = binary.LittleEndian.AppendUint64(e.buf, math.Float64bits(v))
}

func (e *encoder) bytes(b []byte) {
	e.buf = append(e.buf, 'b')
	e.u32(len(b))
	e.buf = append(e.buf, b...)
}
func (e *encoder) str(s string) {
	e.buf = append(e.buf, 's')
	e.u32(len(s))
	e.buf = append(e.buf, s...)
}
func (e *encoder) key(s string) {
	e.buf = append(e.buf, 'k')
	e.u32(len(s))
	e.buf = append(e.buf, s...)
}
func (e *encoder) tuple(n int) { e.buf = append(e.buf, 't'); e.u32(n) }
func (e *encoder) list(n int)  { e.buf = append(e.buf, 'l'); e.u32(n) }
func (e *encoder) dict(n int)  { e.buf = append(e.buf, 'm'); e.u32(n) }

// finish copies the encoding into C memory, which the shim frees, and
// returns the encoder to its pool.
func (e *encoder) finish(out *C.pgn_buffer) {
	n := len(e.buf)
	p := C.malloc(C.size_t(max(n, 1)))
	copy(unsafe.Slice((*byte)(p), n), e.buf)
	out.data, out.len = (*C.char)(p), C.size_t(n)
	if cap(e.buf) <= 1<<20 {
		encoders.Put(e)
	}
}
