// Command capi is the C API of the Go core, built with
// -buildmode=c-archive and linked into the CPython extension
// (python/pygrpc_native/_native.c). Every function takes a front handle
// first; pointers from C are only read during the call and copied before
// anything keeps them, and buffers returned to C are malloc'ed for C to
// free. None of these functions touch Python, and the shim releases the GIL
// around every one that can block.
package main

/*
#include <stdlib.h>
#include "pgn.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"time"
	"unsafe"

	"github.com/pygrpc-native/pygrpc-native/go/front"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
)

// The shim relies on these numbers; a mismatch fails the build.
var (
	_ [C.PGN_EVENT_CALL - int(front.EventCall)]struct{}
	_ [int(front.EventCall) - C.PGN_EVENT_CALL]struct{}
	_ [C.PGN_EVENT_CANCEL - int(front.EventCancel)]struct{}
	_ [int(front.EventCancel) - C.PGN_EVENT_CANCEL]struct{}
	_ [C.PGN_EVENT_LOOKUP - int(front.EventLookup)]struct{}
	_ [int(front.EventLookup) - C.PGN_EVENT_LOOKUP]struct{}
	_ [C.PGN_FALLBACK - int(front.FallbackMethodID)]struct{}
	_ [int(front.FallbackMethodID) - C.PGN_FALLBACK]struct{}
	_ [C.PGN_STOPPED - int(front.ResultStopped)]struct{}
	_ [int(front.ResultStopped) - C.PGN_STOPPED]struct{}
	_ [C.PGN_WOULD_BLOCK - int(front.ResultWouldBlock)]struct{}
	_ [int(front.ResultWouldBlock) - C.PGN_WOULD_BLOCK]struct{}
)

func main() {}

// goMessage copies a message from C memory for grpc-go to send
// (front.CopyMessage: one copy, no clearing).
func goMessage(p *C.char, n C.size_t) mem.BufferSlice {
	return front.CopyMessage(unsafe.Slice((*byte)(unsafe.Pointer(p)), int(n)))
}

// goBytes copies n bytes from C memory.
func goBytes(p *C.char, n C.size_t) []byte {
	if n == 0 {
		return []byte{}
	}
	b := make([]byte, int(n))
	copy(b, unsafe.Slice((*byte)(unsafe.Pointer(p)), int(n)))
	return b
}

// setError hands an error message to C (malloc'ed) and names its kind.
func setError(err error, out **C.char) C.int {
	*out = C.CString(err.Error())
	var ce *front.ConfigError
	var be *front.BindError
	switch {
	case errors.As(err, &ce):
		return C.PGN_ERR_VALUE
	case errors.As(err, &be):
		return C.PGN_ERR_OS
	default:
		return C.PGN_ERR_RUNTIME
	}
}

//export pgn_new
func pgn_new(cfg *C.char, cfgLen C.size_t, errOut **C.char) C.int64_t {
	c, err := front.ParseConfig(goBytes(cfg, cfgLen))
	if err != nil {
		return -C.int64_t(setError(err, errOut))
	}
	f, err := front.New(c)
	if err != nil {
		return -C.int64_t(setError(err, errOut))
	}
	return C.int64_t(addHandle(f))
}

//export pgn_start
func pgn_start(h C.int64_t, errOut **C.char) C.int {
	f := getHandle(int64(h))
	if f == nil {
		return setError(errors.New("the front is closed"), errOut)
	}
	if err := f.Start(); err != nil {
		return setError(err, errOut)
	}
	return 0
}

//export pgn_port
func pgn_port(h C.int64_t) C.int {
	if f := getHandle(int64(h)); f != nil {
		return C.int(f.Port())
	}
	return 0
}

// pgn_stop stops the front (graceNs < 0: no grace). With wait it returns
// once the front has stopped; without, once new calls are refused.
//
//export pgn_stop
func pgn_stop(h C.int64_t, graceNs C.int64_t, wait C.int) C.int {
	f := getHandle(int64(h))
	if f == nil {
		return C.PGN_BAD_HANDLE
	}
	if wait != 0 {
		f.Stop(time.Duration(graceNs))
	} else {
		f.BeginStop(time.Duration(graceNs))
	}
	return C.PGN_OK
}

// pgn_event_fd returns the front's event descriptor (Events.EventFD), or -1
// with *errOut set.
//
//export pgn_event_fd
func pgn_event_fd(h C.int64_t, errOut **C.char) C.int {
	f := getHandle(int64(h))
	if f == nil {
		setError(errors.New("the front is closed"), errOut)
		return -1
	}
	fd, err := f.Events().EventFD()
	if err != nil {
		setError(err, errOut)
		return -1
	}
	return C.int(fd)
}

// pgn_release stops the front at once and forgets the handle.
//
//export pgn_release
func pgn_release(h C.int64_t) {
	if f := removeHandle(int64(h)); f != nil {
		f.Close()
	}
}

// pgn_bind listens on addr (the configured address when addrLen is 0) and
// returns the port, or -kind with *errOut set.
//
//export pgn_bind
func pgn_bind(h C.int64_t, addr *C.char, addrLen C.size_t, errOut **C.char) C.int {
	f := getHandle(int64(h))
	if f == nil {
		return -setError(errors.New("the front is closed"), errOut)
	}
	port, err := f.Bind(string(goBytes(addr, addrLen)))
	if err != nil {
		return -setError(err, errOut)
	}
	return C.int(port)
}

// pgn_add_method serves a method natively and returns its id, or -kind
// with *errOut set.
//
//export pgn_add_method
func pgn_add_method(h C.int64_t, path *C.char, pathLen C.size_t, serverStreaming C.int, errOut **C.char) C.int {
	f := getHandle(int64(h))
	if f == nil {
		return -setError(errors.New("the front is closed"), errOut)
	}
	id, err := f.AddMethod(string(goBytes(path, pathLen)), serverStreaming != 0)
	if err != nil {
		return -setError(err, errOut)
	}
	return C.int(id)
}

// pgn_add_fallback_method relays every call of a method to the fallback
// server; 0, or -kind with *errOut set.
//
//export pgn_add_fallback_method
func pgn_add_fallback_method(h C.int64_t, path *C.char, pathLen C.size_t, errOut **C.char) C.int {
	f := getHandle(int64(h))
	if f == nil {
		return -setError(errors.New("the front is closed"), errOut)
	}
	if err := f.AddFallbackMethod(string(goBytes(path, pathLen))); err != nil {
		return -setError(err, errOut)
	}
	return 0
}

// pgn_route continues a looked-up call as method methodID, or relays it
// to the fallback server (methodID -1). A route the front can't take (an
// unknown method id, no fallback, a call not waiting for a lookup) is
// PGN_UNKNOWN_METHOD with *errOut set.
//
//export pgn_route
func pgn_route(h C.int64_t, id C.uint64_t, methodID C.int, errOut **C.char) C.int {
	f := getHandle(int64(h))
	if f == nil {
		return C.PGN_BAD_HANDLE
	}
	r, err := f.Calls().Route(uint64(id), int32(methodID))
	if err != nil {
		*errOut = C.CString(err.Error())
		return C.PGN_UNKNOWN_METHOD
	}
	return C.int(r)
}

// pgn_recv waits up to a->timeout_ns (< 0: forever) for events of the
// queue a->queue and describes up to a->max_events of them in a->events:
// kind, call id, method id and the sizes of the payload and client key.
// The payloads and keys stay in Go until pgn_fill copies them straight
// into the caller's memory; a->batch names them. See pgn.h.
//
//export pgn_recv
func pgn_recv(h C.int64_t, a *C.pgn_recv_args) C.int {
	f := getHandle(int64(h))
	if f == nil {
		return C.PGN_RECV_BAD_HANDLE
	}
	max, timeout := int(a.max_events), time.Duration(a.timeout_ns)
	var batch []front.Event
	var closed bool
	if a.queue == C.PGN_QUEUE_WATCHED {
		batch, closed = f.Events().RecvWatched(max, timeout)
	} else {
		batch, closed = f.Events().Recv(max, int(a.max_bytes), timeout)
	}
	if closed {
		return C.PGN_RECV_CLOSED
	}
	if len(batch) == 0 {
		return C.PGN_RECV_TIMEOUT
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
		if withKeys {
			out[i].key_len = C.uint64_t(len(e.ClientKey))
			keysLen += len(e.ClientKey)
		}
	}
	a.count = C.int32_t(len(batch))
	a.keys_len = C.uint64_t(keysLen)
	a.batch = C.uint64_t(batches.put(heldBatch{calls: f.Calls(), events: batch, withKeys: withKeys}))
	return C.PGN_RECV_BATCH
}

// pgn_fill copies the payloads of a batch from pgn_recv into payloads[i]
// (exactly payload_len bytes each; NULL for EVENT_CANCEL) and the client
// keys, one after the other, into keys, then forgets the batch. A call
// whose payloads[i] is NULL could not be delivered (the shim ran out of
// memory): it is ended with RESOURCE_EXHAUSTED, so no call is lost unseen.
//
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
		if e.Kind == front.EventCancel {
			continue
		}
		if dsts[i] == nil {
			e.Release()
			b.calls.Finish(e.CallID, front.Ending{Code: codes.ResourceExhausted, Details: "the server could not allocate memory for the request"}, false)
			continue
		}
		dst := unsafe.Slice((*byte)(unsafe.Pointer(dsts[i])), e.Payload.Len())
		off := 0
		for _, buf := range e.Payload {
			off += copy(dst[off:], buf.ReadOnlyData())
		}
		e.Release()
	}
}

// onCalls runs a per-call operation on the live calls of front h.
func onCalls(h C.int64_t, fn func(*front.Calls) front.Result) C.int {
	f := getHandle(int64(h))
	if f == nil {
		return C.PGN_BAD_HANDLE
	}
	return C.int(fn(f.Calls()))
}

//export pgn_respond
func pgn_respond(h C.int64_t, id C.uint64_t, p *C.char, n C.size_t, block C.int) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result {
		return calls.Respond(uint64(id), goMessage(p, n), block != 0)
	})
}

//export pgn_send
func pgn_send(h C.int64_t, id C.uint64_t, p *C.char, n C.size_t, block C.int) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result {
		return calls.Send(uint64(id), goMessage(p, n), block != 0)
	})
}

// pgn_send_header sends initial metadata. Metadata gRPC can't carry ends
// the call with INTERNAL and gives PGN_INVALID_METADATA with *errOut set.
//
//export pgn_send_header
func pgn_send_header(h C.int64_t, id C.uint64_t, md *C.char, mdLen C.size_t, block C.int, errOut **C.char) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result {
		r, err := calls.SendHeader(uint64(id), decodeMetadata(md, mdLen), block != 0)
		return invalidMetadata(r, err, errOut)
	})
}

// invalidMetadata reports a metadata error to C, unless the op could not
// even be posted (the call ended, or the buffer is full and the shim will
// retry blocking).
func invalidMetadata(r front.Result, err error, errOut **C.char) front.Result {
	if err != nil && r == front.ResultOK {
		*errOut = C.CString(err.Error())
		return C.PGN_INVALID_METADATA
	}
	return r
}

// pgn_finish ends a call. payload may be NULL for no last message.
// Metadata errors as in pgn_send_header.
//
//export pgn_finish
func pgn_finish(h C.int64_t, id C.uint64_t, code C.int, details *C.char, detailsLen C.size_t,
	md *C.char, mdLen C.size_t, payload *C.char, payloadLen C.size_t, block C.int, errOut **C.char) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result {
		e := front.Ending{
			Code:       codes.Code(code),
			Details:    string(goBytes(details, detailsLen)),
			Trailer:    decodeMetadata(md, mdLen),
			HasMessage: payload != nil,
		}
		if e.HasMessage {
			e.Message = goMessage(payload, payloadLen)
		}
		r, err := calls.Finish(uint64(id), e, block != 0)
		return invalidMetadata(r, err, errOut)
	})
}

// pgn_set_compression sets a call's response compression: "" (none),
// "deflate" or "gzip". Another name gives PGN_INVALID_ARGUMENT with *errOut
// set, and the call is left as it was.
//
//export pgn_set_compression
func pgn_set_compression(h C.int64_t, id C.uint64_t, name *C.char, nameLen C.size_t, block C.int, errOut **C.char) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result {
		r, err := calls.SetCompression(uint64(id), string(goBytes(name, nameLen)), block != 0)
		if err != nil {
			*errOut = C.CString(err.Error())
			return C.PGN_INVALID_ARGUMENT
		}
		return r
	})
}

// pgn_disable_next_compression sends the call's next message uncompressed.
//
//export pgn_disable_next_compression
func pgn_disable_next_compression(h C.int64_t, id C.uint64_t, block C.int) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result { return calls.DisableNextCompression(uint64(id), block != 0) })
}

//export pgn_watch
func pgn_watch(h C.int64_t, id C.uint64_t) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result { return calls.Watch(uint64(id)) })
}

//export pgn_cancel
func pgn_cancel(h C.int64_t, id C.uint64_t) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result { return calls.Cancel(uint64(id)) })
}

//export pgn_is_active
func pgn_is_active(h C.int64_t, id C.uint64_t, active *C.int) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result {
		a, r := calls.IsActive(uint64(id))
		*active = 0
		if a {
			*active = 1
		}
		return r
	})
}

// pgn_time_remaining sets *ns to the time left, or -1 without a deadline.
//
//export pgn_time_remaining
func pgn_time_remaining(h C.int64_t, id C.uint64_t, ns *C.int64_t) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result {
		left, has, r := calls.TimeRemaining(uint64(id))
		*ns = -1
		if has {
			*ns = C.int64_t(left)
		}
		return r
	})
}

// pgn_call_details returns a dict: method, invocation_metadata (list of
// (key, value) tuples; bytes values for -bin keys), peer, authority,
// client_key, time_remaining (float seconds or None), auth_context (dict of
// str to list of bytes, grpcio's keys) and peer_identity_key (str or None).
//
//export pgn_call_details
func pgn_call_details(h C.int64_t, id C.uint64_t, out **C.char, outLen *C.size_t) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result {
		d, r := calls.Details(uint64(id))
		if r != front.ResultOK {
			return r
		}
		e := getEncoder()
		e.dict(8)
		e.str("method")
		e.str(d.Method)
		e.str("invocation_metadata")
		e.tuple(len(d.Metadata))
		for _, kv := range d.Metadata {
			e.tuple(2)
			e.str(kv[0])
			if len(kv[0]) > 4 && kv[0][len(kv[0])-4:] == "-bin" {
				e.bytes([]byte(kv[1]))
			} else {
				e.str(kv[1])
			}
		}
		e.str("peer")
		e.str(d.Peer)
		e.str("authority")
		e.str(d.Authority)
		e.str("client_key")
		e.str(d.ClientKey)
		e.str("time_remaining")
		if d.HasDeadline {
			e.float(d.TimeRemaining.Seconds())
		} else {
			e.none()
		}
		props, identityKey := authContext(d.Security)
		e.str("auth_context")
		e.dict(len(props))
		for _, p := range props {
			e.str(p.name)
			e.list(len(p.values))
			for _, v := range p.values {
				e.bytes(v)
			}
		}
		e.str("peer_identity_key")
		if identityKey != "" {
			e.str(identityKey)
		} else {
			e.none()
		}
		e.finish(out, outLen)
		return front.ResultOK
	})
}

// pgn_check_tls checks TLS credentials (front.ParseTLS): 0, or an error
// kind with *errOut set. It needs no front: ssl_server_credentials() calls
// it to refuse bad PEM when the credentials are made.
//
//export pgn_check_tls
func pgn_check_tls(doc *C.char, docLen C.size_t, errOut **C.char) C.int {
	if _, err := front.ParseTLS(goBytes(doc, docLen)); err != nil {
		return setError(err, errOut)
	}
	return 0
}

// pgn_set_tls replaces the front's TLS credentials (JSON null: plaintext)
// before it starts: 0, or an error kind with *errOut set.
//
//export pgn_set_tls
func pgn_set_tls(h C.int64_t, doc *C.char, docLen C.size_t, errOut **C.char) C.int {
	f := getHandle(int64(h))
	if f == nil {
		return setError(errors.New("the front is closed"), errOut)
	}
	cfg, err := front.ParseTLS(goBytes(doc, docLen))
	if err != nil {
		return setError(err, errOut)
	}
	if err := f.SetTLS(cfg); err != nil {
		return setError(err, errOut)
	}
	return 0
}

//export pgn_metrics
func pgn_metrics(h C.int64_t, out **C.char, outLen *C.size_t) C.int {
	f := getHandle(int64(h))
	if f == nil {
		return C.PGN_BAD_HANDLE
	}
	ms := f.Metrics()
	e := getEncoder()
	e.dict(len(ms))
	for _, m := range ms {
		e.str(m.Name)
		e.int(m.Value)
	}
	e.finish(out, outLen)
	return C.PGN_OK
}

// decodeMetadata reads the shim's metadata encoding: u32 count, then count
// times (u32 key length, key, u32 value length, value). The shim builds it
// from a sequence of (str, str | bytes) pairs; a malformed buffer yields
// what could be read, never a crash.
func decodeMetadata(p *C.char, n C.size_t) metadata.MD {
	if p == nil {
		return nil
	}
	return decodeMetadataBytes(unsafe.Slice((*byte)(unsafe.Pointer(p)), int(n)))
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

// pgn_enable_health makes the front answer grpc.health.v1.Health's Check
// and Watch itself (Health.Enable).
//
//export pgn_enable_health
func pgn_enable_health(h C.int64_t, changesOnly C.int) C.int {
	f := getHandle(int64(h))
	if f == nil {
		return C.PGN_BAD_HANDLE
	}
	f.Health().Enable(changesOnly != 0)
	return C.PGN_OK
}

// pgn_set_health sets a service's health status: 0, or an error kind with
// *errOut set.
//
//export pgn_set_health
func pgn_set_health(h C.int64_t, service *C.char, serviceLen C.size_t, status C.int32_t, errOut **C.char) C.int {
	f := getHandle(int64(h))
	if f == nil {
		return setError(errors.New("the front is closed"), errOut)
	}
	if err := f.Health().Set(string(goBytes(service, serviceLen)), int32(status)); err != nil {
		return setError(err, errOut)
	}
	return 0
}

// pgn_enter_health_shutdown sets every service NOT_SERVING for good: 0, or
// an error kind with *errOut set.
//
//export pgn_enter_health_shutdown
func pgn_enter_health_shutdown(h C.int64_t, errOut **C.char) C.int {
	f := getHandle(int64(h))
	if f == nil {
		return setError(errors.New("the front is closed"), errOut)
	}
	if err := f.Health().EnterShutdown(); err != nil {
		return setError(err, errOut)
	}
	return 0
}
