package main

/*
#include <stdlib.h>
#include "pgn.h"
*/
import "C"

import (
	"errors"

	"github.com/pygrpc-native/pygrpc-native/go/front"
	"google.golang.org/grpc/codes"
)

// The operations on a call, by id (pgn.h: "operations on a call"). Each
// returns the front.Result of the operation as the pgn_result of the same
// number (result.go checks the numbers).

// onCalls runs a per-call operation on the live calls of the front behind
// h and returns its result: withFront for the per-message path, without a
// second closure.
func onCalls(h C.int64_t, fn func(*front.Calls) front.Result) C.int {
	f := getHandle(int64(h))
	if f == nil {
		return C.PGN_BAD_HANDLE
	}
	return C.int(fn(f.Calls()))
}

//export pgn_route
func pgn_route(h C.int64_t, id C.uint64_t, methodID C.int32_t, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int {
		r, err := f.Calls().Route(uint64(id), int32(methodID))
		if err != nil {
			return fail(C.PGN_UNKNOWN_METHOD, err, errOut)
		}
		return C.int(r)
	})
}

//export pgn_respond
func pgn_respond(h C.int64_t, id C.uint64_t, msg C.pgn_bytes, block C.int32_t) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result {
		return calls.Respond(uint64(id), goMessage(msg), sending(block))
	})
}

//export pgn_send
func pgn_send(h C.int64_t, id C.uint64_t, msg C.pgn_bytes, block C.int32_t) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result { return calls.Send(uint64(id), goMessage(msg), sending(block)) })
}

//export pgn_send_header
func pgn_send_header(h C.int64_t, id C.uint64_t, md C.pgn_metadata, block C.int32_t, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int {
		r, err := f.Calls().SendHeader(uint64(id), goMetadata(md), sending(block))
		if errors.Is(err, front.ErrInitialMetadataAgain) {
			return fail(C.PGN_INVALID_ARGUMENT, err, errOut)
		}
		return invalidMetadata(r, err, errOut)
	})
}

//export pgn_finish
func pgn_finish(h C.int64_t, id C.uint64_t, a *C.pgn_finish_args, block C.int32_t, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int {
		e := front.Ending{
			Code:       codes.Code(a.code),
			Details:    goString(a.details),
			Trailer:    goMetadata(a.metadata),
			HasMessage: a.payload.data != nil,
		}
		if e.HasMessage {
			e.Message = goMessage(a.payload)
		}
		r, err := f.Calls().Finish(uint64(id), e, sending(block))
		return invalidMetadata(r, err, errOut)
	})
}

// sending is a send's pgn_sending as front.Sending (the same numbers); an
// unknown value is PGN_SEND_NO_WAIT, which never waits.
func sending(block C.int32_t) front.Sending {
	if block < C.PGN_SEND_NO_WAIT || block > C.PGN_SEND_HELD {
		return front.SendNoWait
	}
	return front.Sending(block)
}

// invalidMetadata reports a metadata error to C as PGN_INVALID_METADATA,
// unless the op could not even be posted (the call ended, or the buffer is
// full and the shim will retry blocking): then the op's result stands.
func invalidMetadata(r front.Result, err error, errOut **C.char) C.int {
	if err != nil && r == front.ResultOK {
		return fail(C.PGN_INVALID_METADATA, err, errOut)
	}
	return C.int(r)
}

//export pgn_set_compression
func pgn_set_compression(h C.int64_t, id C.uint64_t, name C.pgn_bytes, block C.int32_t, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int {
		r, err := f.Calls().SetCompression(uint64(id), goString(name), sending(block))
		if err != nil {
			return fail(C.PGN_INVALID_ARGUMENT, err, errOut)
		}
		return C.int(r)
	})
}

//export pgn_disable_next_compression
func pgn_disable_next_compression(h C.int64_t, id C.uint64_t, block C.int32_t) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result { return calls.DisableNextCompression(uint64(id), sending(block)) })
}

//export pgn_request_messages
func pgn_request_messages(h C.int64_t, id C.uint64_t, n C.int32_t, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int {
		r, err := f.Calls().RequestMessages(uint64(id), int(n))
		if err != nil {
			return fail(C.PGN_INVALID_ARGUMENT, err, errOut)
		}
		return C.int(r)
	})
}

//export pgn_handler_done
func pgn_handler_done(h C.int64_t, id C.uint64_t) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result { return calls.HandlerDone(uint64(id)) })
}

//export pgn_wait_room
func pgn_wait_room(h C.int64_t, id C.uint64_t) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result { return calls.WaitRoom(uint64(id)) })
}

//export pgn_notify_room
func pgn_notify_room(h C.int64_t, id C.uint64_t) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result { return calls.NotifyRoom(uint64(id)) })
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
func pgn_is_active(h C.int64_t, id C.uint64_t, active *C.int32_t) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result {
		a, r := calls.IsActive(uint64(id))
		*active = 0
		if a {
			*active = 1
		}
		return r
	})
}

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

//export pgn_call_details
func pgn_call_details(h C.int64_t, id C.uint64_t, out *C.pgn_buffer) C.int {
	return onCalls(h, func(calls *front.Calls) front.Result {
		d, r := calls.Details(uint64(id))
		if r != front.ResultOK {
			return r
		}
		encodeDetails(d, out)
		return front.ResultOK
	})
}

// encodeDetails writes a call's details as pgn.h's pgn_call_details says.
func encodeDetails(d front.CallDetails, out *C.pgn_buffer) {
	e := getEncoder()
	e.dict(8)
	e.str("method")
	e.str(d.Method)
	e.str("invocation_metadata")
	e.tuple(len(d.Metadata))
	for _, kv := range d.Metadata {
		e.tuple(2)
		e.str(kv[0])
		if front.BinaryOnArrival(kv[0]) {
			e.bytes([]byte(kv[1]))
		} else {
			e.str(textValue(kv[1]))
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
	e.finish(out)
}
