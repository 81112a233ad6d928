// Command capi is the C API of the Go core, built with
// -buildmode=c-archive and linked into the CPython extension
// (python/pygrpc_native/_native.c). pgn.h declares every export with its
// contract and states the one convention they all keep: a pgn_result
// returned, values through out-parameters, a message in *err for the codes
// that carry one, borrowed inputs, malloc'ed outputs. None of these
// functions touch Python.
package main

/*
#include <stdlib.h>
#include "pgn.h"
*/
import "C"

import (
	"time"
	"unsafe"

	"github.com/pygrpc-native/pygrpc-native/go/front"
	"google.golang.org/grpc/mem"
)

func main() {}

// cBytes is b's memory seen as a Go slice, valid only during the call.
func cBytes(b C.pgn_bytes) []byte {
	if b.len == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(b.data)), int(b.len))
}

// goBytes copies b into Go memory.
func goBytes(b C.pgn_bytes) []byte { return append([]byte{}, cBytes(b)...) }

// goString copies b into a Go string.
func goString(b C.pgn_bytes) string { return string(cBytes(b)) }

// goMessage copies a message from C memory for grpc-go to send
// (front.CopyMessage: one copy, no clearing).
func goMessage(b C.pgn_bytes) mem.BufferSlice { return front.CopyMessage(cBytes(b)) }

// ---- the front ----

//export pgn_new
func pgn_new(config C.pgn_bytes, h *C.int64_t, errOut **C.char) C.int {
	c, err := front.ParseConfig(goBytes(config))
	if err != nil {
		return errorResult(err, errOut)
	}
	f, err := front.New(c)
	if err != nil {
		return errorResult(err, errOut)
	}
	*h = C.int64_t(addHandle(f))
	return C.PGN_OK
}

//export pgn_release
func pgn_release(h C.int64_t) {
	if f := removeHandle(int64(h)); f != nil {
		f.Close()
	}
}

//export pgn_bind
func pgn_bind(h C.int64_t, addr C.pgn_bytes, port *C.int32_t, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int {
		p, err := f.Bind(goString(addr))
		if err != nil {
			return errorResult(err, errOut)
		}
		*port = C.int32_t(p)
		return C.PGN_OK
	})
}

//export pgn_start
func pgn_start(h C.int64_t, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int { return errorResult(f.Start(), errOut) })
}

//export pgn_port
func pgn_port(h C.int64_t, port *C.int32_t) C.int {
	return withFront(h, func(f *front.Front) C.int {
		*port = C.int32_t(f.Port())
		return C.PGN_OK
	})
}

//export pgn_stop
func pgn_stop(h C.int64_t, graceNs C.int64_t, wait C.int32_t) C.int {
	return withFront(h, func(f *front.Front) C.int {
		if wait != 0 {
			f.Stop(time.Duration(graceNs))
		} else {
			f.BeginStop(time.Duration(graceNs))
		}
		return C.PGN_OK
	})
}

// pgn_event_fd: every failure of Events.EventFD is the system's (no
// descriptor could be made), hence PGN_OS_ERROR.
//
//export pgn_event_fd
func pgn_event_fd(h C.int64_t, fd *C.int32_t, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int {
		n, err := f.Events().EventFD()
		if err != nil {
			return fail(C.PGN_OS_ERROR, err, errOut)
		}
		*fd = C.int32_t(n)
		return C.PGN_OK
	})
}

//export pgn_set_loop_senders
func pgn_set_loop_senders(h C.int64_t, on C.int32_t) C.int {
	return withFront(h, func(f *front.Front) C.int {
		f.Calls().SetLoopSenders(on != 0)
		return C.PGN_OK
	})
}

//export pgn_flush_held
func pgn_flush_held(h C.int64_t) C.int {
	return withFront(h, func(f *front.Front) C.int {
		f.Calls().FlushHeld()
		return C.PGN_OK
	})
}

//export pgn_add_method
func pgn_add_method(h C.int64_t, path C.pgn_bytes, serverStreaming, clientStreaming C.int32_t, methodID *C.int32_t, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int {
		id, err := f.AddMethod(front.Method{Path: goString(path), ServerStreaming: serverStreaming != 0, ClientStreaming: clientStreaming != 0})
		if err != nil {
			return errorResult(err, errOut)
		}
		*methodID = C.int32_t(id)
		return C.PGN_OK
	})
}

//export pgn_add_fallback_method
func pgn_add_fallback_method(h C.int64_t, path C.pgn_bytes, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int { return errorResult(f.AddFallbackMethod(goString(path)), errOut) })
}

//export pgn_check_tls
func pgn_check_tls(doc C.pgn_bytes, errOut **C.char) C.int {
	_, err := front.ParseTLS(goBytes(doc))
	return errorResult(err, errOut)
}

//export pgn_set_tls
func pgn_set_tls(h C.int64_t, doc C.pgn_bytes, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int {
		cfg, err := front.ParseTLS(goBytes(doc))
		if err == nil {
			err = f.SetTLS(cfg)
		}
		return errorResult(err, errOut)
	})
}

//export pgn_metrics
func pgn_metrics(h C.int64_t, out *C.pgn_buffer) C.int {
	return withFront(h, func(f *front.Front) C.int {
		ms := f.Metrics()
		e := getEncoder()
		e.dict(len(ms))
		for _, m := range ms {
			e.str(m.Name)
			e.int(m.Value)
		}
		e.finish(out)
		return C.PGN_OK
	})
}

//export pgn_enable_health
func pgn_enable_health(h C.int64_t, changesOnly C.int32_t, methods C.uint32_t) C.int {
	return withFront(h, func(f *front.Front) C.int {
		f.Health().Enable(changesOnly != 0, front.HealthMethods(methods))
		return C.PGN_OK
	})
}

//export pgn_set_health
func pgn_set_health(h C.int64_t, service C.pgn_bytes, status C.int32_t, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int {
		return errorResult(f.Health().Set(goString(service), int32(status)), errOut)
	})
}

//export pgn_enter_health_shutdown
func pgn_enter_health_shutdown(h C.int64_t, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int { return errorResult(f.Health().EnterShutdown(), errOut) })
}
