package front

import (
	"context"
	"sync"
	"sync/atomic"
)

// orderState keeps the events of one connection's calls in the order their
// HEADERS frames arrived, for NativeGrpcFront(ordered=True).
//
// grpc-go runs each call's handler in its own goroutine, so calls sent back
// to back can reach the queue in any order. Each call takes a ticket while
// grpc-go still reads the connection in order (the tap handler), and its
// event waits until every earlier ticket on the connection is resolved:
// delivered as an event, or skipped because the call never reached Python.
// Guarded by mu, which is held while the events it releases are queued, so
// that one connection's batches enter the queue in order.
type orderState struct {
	mu      sync.Mutex
	issued  uint64
	next    uint64
	pending map[uint64]*Event // resolved tickets after next; nil Event = skipped
}

// ticket is one call's place in its connection's order.
type ticket struct {
	order *orderState
	// queue is where the connection's events go once in order.
	queue    *eventQueue
	n        uint64
	resolved atomic.Bool
	// unwatch unregisters the watch on the call's context that gives up
	// the place if the call ends first; set before the ticket is shared.
	unwatch func() bool
}

type ticketKey struct{}

// takeTicket gives the call in ctx the next place on its connection and
// makes sure the place is given up if the call ends before it is resolved,
// so a call grpc-go drops after the tap can never stall its successors.
func takeTicket(ctx context.Context, o *orderState, q *eventQueue) context.Context {
	o.mu.Lock()
	t := &ticket{order: o, queue: q, n: o.issued}
	o.issued++
	o.mu.Unlock()
	t.unwatch = context.AfterFunc(ctx, func() { t.settle(nil) })
	return context.WithValue(ctx, ticketKey{}, t)
}

func ticketFrom(ctx context.Context) *ticket {
	t, _ := ctx.Value(ticketKey{}).(*ticket)
	return t
}

// resolve delivers e (or skips the place when e is nil) and flushes every
// event that was waiting for this ticket. Only the first resolve (or
// settle) counts. It unregisters the watch on the call's end first: left
// registered, it would run on a goroutine of its own at every call's end.
func (t *ticket) resolve(e *Event) bool {
	t.unwatch()
	return t.settle(e)
}

// settle is resolve without unregistering the watch: the watch's own
// (the call ended first), which runs concurrently with takeTicket's
// assignment of unwatch.
func (t *ticket) settle(e *Event) bool {
	if !t.resolved.CompareAndSwap(false, true) {
		return true
	}
	o := t.order
	o.mu.Lock()
	defer o.mu.Unlock()
	if t.n != o.next {
		if o.pending == nil {
			o.pending = make(map[uint64]*Event)
		}
		o.pending[t.n] = e
		return true
	}
	var ready []Event
	if e != nil {
		ready = append(ready, *e)
	}
	o.next++
	for {
		w, ok := o.pending[o.next]
		if !ok {
			break
		}
		delete(o.pending, o.next)
		if w != nil {
			ready = append(ready, *w)
		}
		o.next++
	}
	// Pushing under o.mu keeps this connection's batches in order.
	return len(ready) == 0 || t.queue.pushAll(ready)
}
