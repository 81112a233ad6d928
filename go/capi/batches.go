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
