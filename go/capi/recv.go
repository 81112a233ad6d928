package main

/*
#include "pgn.h"
*/
import "C"

import (
	"time"
	"unsafe"

	"github.com/pygrpc-native/pygrpc-native/go/front"
	"google.golang.org/grpc/codes"
)

//export pgn_recv
func pgn_recv(h C.int64_t, a *C.pgn_recv_args) C.int {
	return withFront(h, func(f *front.Front) C.int {
		max, timeout := int(a.max_events), time.Duration(a.timeout_ns)
		var batch []front.Event
		var closed bool
		if a.queue == C.PGN_QUEUE_WATCHED {
			batch, closed = f.Events().RecvWatched(max, timeout)
		} else {
			batch, closed = f.Events().RecvInto(takeEventSlice(), max, int(a.max_bytes), timeout)
		}
		if closed {
			giveEventSlice(batch)
			return C.PGN_STOPPED
		}
		a.count = C.int32_t(len(batch))
		if len(batch) == 0 {
			giveEventSlice(batch)
			return C.PGN_OK
		}
		withKeys := a.with_keys != 0
		out := unsafe.Slice(a.events, len(batch))
		keysLen := 0
		for i := range batch {
			e := &batch[i]
			out[i] = C.pgn_event{
				call_id:     C.uint64_t(e.CallID),
				kind:        C.int32_t(e.Kind),
				method_id:   C.int32_t(e.MethodID),
				payload_len: C.uint64_t(e.Payload.Len()),
			}
			if e.HasPayload() {
				out[i].has_payload = 1
			}
			if withKeys {
				out[i].key_len = C.uint64_t(len(e.ClientKey))
				keysLen += len(e.ClientKey)
			}
		}
		a.keys_len = C.uint64_t(keysLen)
		a.batch = C.uint64_t(batches.put(heldBatch{calls: f.Calls(), events: batch, withKeys: withKeys}))
		return C.PGN_OK
	})
}

//export pgn_fill
func pgn_fill(batch C.uint64_t, payloads **C.char, keys *C.char) {
	b, ok := batches.take(uint64(batch))
	if !ok {
		return
	}
	dsts := unsafe.Slice(payloads, len(b.events))
	var keyBuf []byte
	if b.withKeys {
		n := 0
		for i := range b.events {
			n += len(b.events[i].ClientKey)
		}
		keyBuf = unsafe.Slice((*byte)(unsafe.Pointer(keys)), n)
	}
	for i := range b.events {
		e := &b.events[i]
		if b.withKeys {
			keyBuf = keyBuf[copy(keyBuf, e.ClientKey):]
		}
		if !e.HasPayload() {
			e.Release()
			continue
		}
		if dsts[i] == nil {
			e.Release()
			b.calls.Finish(e.CallID, front.Ending{Code: codes.ResourceExhausted, Details: "the server could not allocate memory for the request"}, front.SendNoWait)
			continue
		}
		dst := unsafe.Slice((*byte)(unsafe.Pointer(dsts[i])), e.Payload.Len())
		off := 0
		for _, buf := range e.Payload {
			off += copy(dst[off:], buf.ReadOnlyData())
		}
		e.Release()
	}
	giveEventSlice(b.events) // every event released; the table forgot b
}

//export pgn_read
func pgn_read(h C.int64_t, id C.uint64_t, a *C.pgn_read_args, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int {
		var wake func()
		if w := a.waiter; w != nil {
			wake = func() { C.pgn_waiter_signal(w) }
		}
		msg, eof, r, err := f.Calls().Read(uint64(id), wake)
		if err != nil {
			return fail(C.PGN_INVALID_ARGUMENT, err, errOut)
		}
		if r != front.ResultOK {
			return C.int(r)
		}
		a.eof, a.payload_len, a.batch = 0, 0, 0
		if eof {
			a.eof = 1
			return C.PGN_OK
		}
		n := msg.Len()
		a.payload_len = C.uint64_t(n)
		if a.buf != nil && uint64(n) <= uint64(a.buf_cap) {
			dst := unsafe.Slice((*byte)(unsafe.Pointer(a.buf)), n)
			off := 0
			for _, b := range msg {
				off += copy(dst[off:], b.ReadOnlyData())
			}
			msg.Free()
			return C.PGN_OK
		}
		// A one-event batch, so that pgn_fill copies it as it copies a
		// batch's payloads.
		ev := front.Event{Kind: front.EventMessage, CallID: uint64(id), Payload: msg}
		a.batch = C.uint64_t(batches.put(heldBatch{calls: f.Calls(), events: []front.Event{ev}}))
		return C.PGN_OK
	})
}
