package main

/*
#include <stdlib.h>
#include "pgn.h"
*/
import "C"

import (
	"errors"

	"github.com/pygrpc-native/pygrpc-native/go/front"
)

// equal{}[a-b] compiles only when a == b: a constant index outside an
// array's bounds, or a negative one, is a compile error.
type equal [1]struct{}

// pgn.h's numbers that mirror go/front's, checked at compile time: the
// exports return a front.Result as the pgn_result of the same number, and
// the shim reads event kinds and method ids as Go wrote them. PGN_BAD_HANDLE
// is pinned to follow front.ResultTooLarge, the last front.Result, so the C
// API's own codes never collide with front's.
var (
	_ = equal{}[C.PGN_OK-front.ResultOK]
	_ = equal{}[C.PGN_ENDED-front.ResultEnded]
	_ = equal{}[C.PGN_UNKNOWN-front.ResultUnknown]
	_ = equal{}[C.PGN_WOULD_BLOCK-front.ResultWouldBlock]
	_ = equal{}[C.PGN_STOPPED-front.ResultStopped]
	_ = equal{}[C.PGN_TOO_LARGE-front.ResultTooLarge]
	_ = equal{}[C.PGN_BAD_HANDLE-(front.ResultTooLarge+1)]
	_ = equal{}[C.PGN_EVENT_CALL-front.EventCall]
	_ = equal{}[C.PGN_EVENT_CANCEL-front.EventCancel]
	_ = equal{}[C.PGN_EVENT_LOOKUP-front.EventLookup]
	_ = equal{}[C.PGN_EVENT_MESSAGE-front.EventMessage]
	_ = equal{}[C.PGN_EVENT_HALF_CLOSE-front.EventHalfClose]
	_ = equal{}[C.PGN_EVENT_ROOM-front.EventRoom]
	_ = equal{}[C.PGN_FALLBACK-front.FallbackMethodID]
	_ = equal{}[C.PGN_SEND_NO_WAIT-front.SendNoWait]
	_ = equal{}[C.PGN_SEND_WAIT-front.SendWait]
	_ = equal{}[C.PGN_SEND_HELD-front.SendHeld]
)

// withFront runs fn on the front behind handle h: the prologue of every
// export that takes a handle. A handle that is not live is PGN_BAD_HANDLE.
func withFront(h C.int64_t, fn func(*front.Front) C.int) C.int {
	f := getHandle(int64(h))
	if f == nil {
		return C.PGN_BAD_HANDLE
	}
	return fn(f)
}

// fail hands err's message to C (malloc'ed, for the caller to free) and
// returns code, one of pgn.h's codes "with *err".
func fail(code C.int, err error, errOut **C.char) C.int {
	*errOut = C.CString(err.Error())
	return code
}

// errorResult is PGN_OK for no error, else the code that says which kind of
// failure err is, with its message: a bad configuration or argument
// (front.ConfigError) is PGN_INVALID_ARGUMENT, an address the system won't
// bind (front.BindError) PGN_OS_ERROR, anything else PGN_FAILED.
func errorResult(err error, errOut **C.char) C.int {
	var ce *front.ConfigError
	var be *front.BindError
	switch {
	case err == nil:
		return C.PGN_OK
	case errors.As(err, &ce):
		return fail(C.PGN_INVALID_ARGUMENT, err, errOut)
	case errors.As(err, &be):
		return fail(C.PGN_OS_ERROR, err, errOut)
	default:
		return fail(C.PGN_FAILED, err, errOut)
	}
}
