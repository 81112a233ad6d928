package main

/*
#include "pgn.h"
*/
import "C"

import (
	"errors"
	"time"
	"unsafe"

	"github.com/pygrpc-native/pygrpc-native/go/front"
)

// The exports of A66's call metrics (pgn.h: pgn_metrics_*).

// A pgn_metrics_record and a front.CallRecord are the same 32 bytes, so a
// drain copies records straight into the caller's array.
var _ [unsafe.Sizeof(C.pgn_metrics_record{}) - unsafe.Sizeof(front.CallRecord{})]struct{}
var _ [unsafe.Sizeof(front.CallRecord{}) - unsafe.Sizeof(C.pgn_metrics_record{})]struct{}

var errMetricsOff = errors.New("metrics are off on this server: enable them first")

//export pgn_metrics_enable
func pgn_metrics_enable(h C.int64_t, address C.pgn_bytes, allMethods, records C.int32_t, port *C.int32_t, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int {
		p, err := f.EnableMetrics(front.MetricsConfig{Address: goString(address), AllMethods: allMethods != 0, Records: records != 0})
		if err != nil {
			return errorResult(err, errOut)
		}
		*port = C.int32_t(p)
		return C.PGN_OK
	})
}

//export pgn_metrics_register
func pgn_metrics_register(h C.int64_t, path C.pgn_bytes, errOut **C.char) C.int {
	return withFront(h, func(f *front.Front) C.int {
		cm := f.CallMetrics()
		if cm == nil {
			return errorResult(errMetricsOff, errOut)
		}
		cm.RegisterMethod(goString(path))
		return C.PGN_OK
	})
}

//export pgn_metrics_methods
func pgn_metrics_methods(h C.int64_t, out *C.pgn_buffer) C.int {
	return withFront(h, func(f *front.Front) C.int {
		var names []string
		var started []uint64
		if cm := f.CallMetrics(); cm != nil {
			// Started first: a method added in between has a name and no
			// count yet, never a count without a name.
			started = cm.Started()
			names = cm.MethodNames()
		}
		e := getEncoder()
		e.list(len(started))
		for i, n := range started {
			e.tuple(2)
			e.str(names[i])
			e.int(int64(n))
		}
		e.finish(out)
		return C.PGN_OK
	})
}

//export pgn_metrics_drain
func pgn_metrics_drain(h C.int64_t, dst *C.pgn_metrics_record, capacity C.int32_t, waitNs C.int64_t, count *C.int32_t) C.int {
	return withFront(h, func(f *front.Front) C.int {
		*count = 0
		if capacity <= 0 {
			return C.PGN_OK
		}
		recs := unsafe.Slice((*front.CallRecord)(unsafe.Pointer(dst)), int(capacity))
		n, stopped := f.DrainCallRecords(recs, time.Duration(waitNs))
		*count = C.int32_t(n)
		if stopped {
			return C.PGN_STOPPED
		}
		return C.PGN_OK
	})
}
