package main

import (
	"sync"

	"github.com/pygrpc-native/pygrpc-native/go/front"
)

// heldBatch is a batch pgn_recv has described to C but whose payloads and
// client keys pgn_fill has not copied out yet.
type heldBatch struct {
	calls    *front.Calls // of the front the batch came from
	events   []front.Event
	withKeys bool
}

// batchTable holds each batch between pgn_recv and pgn_fill, by a number C
// keeps meanwhile. A Python thread holds one batch at a time, so the table
// is as small as the number of threads in recv_batch.
type batchTable struct {
	mu   sync.Mutex
	next uint64
	m    map[uint64]heldBatch
}

var batches = batchTable{m: make(map[uint64]heldBatch)}

func (t *batchTable) put(b heldBatch) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	t.m[t.next] = b
	return t.next
}

// take removes and returns a batch; false if there is none by that number.
func (t *batchTable) take(n uint64) (heldBatch, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.m[n]
	delete(t.m, n)
	return b, ok
}

// Event slices of batches pgn_fill is done with, for pgn_recv to fill again
// (front.Events.RecvInto), so that taking events allocates no slice per
// batch. A slice is back here only once pgn_fill has released every event
// in it and cleared it: nothing else refers to a taken batch's slice (the
// table forgot it). Bounded, and slices that grew large are left to the GC.
var freeEvents struct {
	mu    sync.Mutex
	lists [][]front.Event
}

const (
	maxFreeEventLists = 16
	maxFreeEventCap   = 1024
)

// takeEventSlice returns an empty slice to receive a batch into (nil when
// none is free).
func takeEventSlice() []front.Event {
	freeEvents.mu.Lock()
	defer freeEvents.mu.Unlock()
	n := len(freeEvents.lists)
	if n == 0 {
		return nil
	}
	es := freeEvents.lists[n-1]
	freeEvents.lists[n-1] = nil
	freeEvents.lists = freeEvents.lists[:n-1]
	return es
}

// giveEventSlice hands back a batch's slice whose events were all
// released; it is cleared here.
func giveEventSlice(es []front.Event) {
	if cap(es) == 0 || cap(es) > maxFreeEventCap {
		return
	}
	clear(es[:cap(es)])
	freeEvents.mu.Lock()
	if len(freeEvents.lists) < maxFreeEventLists {
		freeEvents.lists = append(freeEvents.lists, es[:0])
	}
	freeEvents.mu.Unlock()
}
