package front

import (
	"context"
	"math"
	"time"

	"google.golang.org/grpc/mem"
)

// EventKind says what an Event reports. The values are a public contract:
// Python sees them as EVENT_CALL, EVENT_CANCEL and EVENT_LOOKUP.
type EventKind uint8

const (
	// EventCall is a new call. Payload is the request message; Python
	// answers it by CallID.
	EventCall EventKind = 1
	// EventCancel says a call ended before Python finished it: the client
	// cancelled, its deadline passed, its connection closed, or the server
	// stopped. The client already has its status; answers to the call are
	// ignored. Payload is nil. A call that ends before any of its events was
	// taken is never reported: its queued events are dropped instead.
	EventCancel EventKind = 2
	// EventLookup is a call to a path the front does not know, sent only
	// when the front resolves unknown methods. Payload is the path (UTF-8)
	// and MethodID is -1. Python answers with Route (to a method it added)
	// or Finish (e.g. UNIMPLEMENTED).
	EventLookup EventKind = 3
	// EventMessage is one request message of a client-streaming call
	// (Payload), read because Python granted credit for it
	// (Calls.RequestMessages).
	EventMessage EventKind = 4
	// EventHalfClose says the client of a client-streaming call has sent
	// its last message; it takes a credit like a message. Payload is nil.
	EventHalfClose EventKind = 5
	// EventRoom says that a call whose buffer was full has room again, as
	// Python asked with Calls.NotifyRoom: an event loop's way to wait for
	// room without polling. Payload is nil.
	EventRoom EventKind = 6
)

// Event is one entry of the queue Python drains with Events.Recv.
type Event struct {
	Kind     EventKind
	CallID   uint64
	MethodID int32
	// Payload holds the request (EventCall) in grpc-go's pooled buffers,
	// or the path (EventLookup); nil for EventCancel. Whoever takes the
	// event copies what it needs and then calls Release, which hands the
	// buffers back to grpc-go's pool (an event never released is only
	// garbage-collected, never a leak).
	Payload   mem.BufferSlice
	ClientKey string
	// call is the call the event belongs to, so that take can drop the
	// events of a call that ended before Python saw it.
	call *call
}

// HasPayload reports whether the event carries bytes for Python: the
// request of a unary-request call, a request message, or a looked-up path.
// EventCancel, EventHalfClose and the EventCall of a client-streaming call
// (its messages follow as EventMessage) carry none.
func (e *Event) HasPayload() bool {
	switch e.Kind {
	case EventCall:
		return e.call == nil || e.call.requests == nil
	case EventMessage, EventLookup:
		return true
	}
	return false
}

// Bytes is a copy of the payload in one slice.
func (e *Event) Bytes() []byte { return e.Payload.Materialize() }

// Release returns the payload's buffers to their pool; the payload must not
// be read afterwards.
func (e *Event) Release() {
	e.Payload.Free()
	e.Payload = nil
}

// Events is what a front hands to Python: the main queue of events (Recv,
// or EventFD for event loops) and the queue of watched calls'
// cancellations (RecvWatched). Handler goroutines put events in; Python's
// threads take them out.
//
// Invariants: every event of one call goes through the main queue, except
// a watched call's EventCancel; both queues close together, once (close),
// after every handler has queued its last event, so a closed queue never
// loses an event.
type Events struct {
	main    *eventQueue
	watched *eventQueue
	m       *metrics
}

func newEvents(m *metrics) *Events {
	return &Events{main: newEventQueue(), watched: newEventQueue(), m: m}
}

// Recv waits up to timeout (negative: forever) for events and returns up
// to max of them, with at most maxBytes of payload unless the first event
// alone has more; closed reports that the front stopped and the queue is
// drained. The caller releases each event (Event.Release) once it has
// copied the payload.
func (e *Events) Recv(max, maxBytes int, timeout time.Duration) (batch []Event, closed bool) {
	return e.RecvInto(nil, max, maxBytes, timeout)
}

// RecvInto is Recv returning the batch in dst's memory (dst[:0], grown as
// needed), so that a caller done with one batch can reuse its slice for
// the next and take events without allocating. The caller must not hold
// on to the events of dst (they are overwritten).
func (e *Events) RecvInto(dst []Event, max, maxBytes int, timeout time.Duration) (batch []Event, closed bool) {
	batch, closed = e.main.recvInto(dst, max, maxBytes, timeout)
	if len(batch) > 0 {
		e.m.batchesDelivered.Add(1)
		e.m.eventsDelivered.Add(uint64(len(batch)))
	}
	return batch, closed
}

// RecvWatched is Recv for the EventCancel events of watched calls
// (Calls.Watch), which carry no payload.
func (e *Events) RecvWatched(max int, timeout time.Duration) (batch []Event, closed bool) {
	return e.watched.recv(max, math.MaxInt, timeout)
}

// EventFD returns a file descriptor that is readable exactly while events
// wait for Recv (or the front has stopped), for event loops: watch it, and
// when it is readable, take events with a zero timeout. It stays open until
// the front is closed.
func (e *Events) EventFD() (int, error) {
	n, err := e.main.notifier()
	if err != nil {
		return -1, err
	}
	return n.r, nil
}

// queued is how many events wait for Recv.
func (e *Events) queued() int { return e.main.len() }

// push queues an event; false once the queues are closed.
func (e *Events) push(ev Event) bool { return e.main.push(ev) }

// deliver queues a call's first event: in arrival order when ctx holds an
// ordering ticket (an ordered front), at once otherwise. False once the
// queues are closed.
func (e *Events) deliver(ctx context.Context, ev Event) bool {
	if t := ticketFrom(ctx); t != nil {
		// A copy of its own, made only here: the ticket may keep it
		// until the calls before it are delivered, and taking ev's
		// address would move every call's event to the heap.
		held := ev
		return t.resolve(&held)
	}
	return e.main.push(ev)
}

// skip gives up the ordering place of a call that never reaches Python
// (refused, relayed, answered natively), so later calls don't wait for it.
func (e *Events) skip(ctx context.Context) {
	if t := ticketFrom(ctx); t != nil {
		t.resolve(nil)
	}
}

// takeTicket gives the call in ctx the next place in its connection's
// order (see orderState).
func (e *Events) takeTicket(ctx context.Context, o *orderState) context.Context {
	return takeTicket(ctx, o, e.main)
}

// cancelled tells Python that a call it did not finish has ended (watched
// and seen are what Calls.end reported): an EventCancel, on the watched
// queue if Python watches the call. A call Python has not seen (its first
// event still queued) is never handed to Python at all: its events are
// dropped and nothing is sent.
func (e *Events) cancelled(c *call, watched, seen bool) {
	if !seen {
		return
	}
	ev := Event{Kind: EventCancel, CallID: c.id, MethodID: c.methodID, ClientKey: c.clientKey}
	if watched {
		e.watched.push(ev)
	} else {
		e.main.push(ev)
	}
}

// close ends both queues: Recv drains what is left, then reports closed.
func (e *Events) close() {
	e.main.close()
	e.watched.close()
}

// release closes the EventFD pipe, if there is one.
func (e *Events) release() { e.main.closeNotifier() }
