package front

import (
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// A client-streaming call's request messages reach Python under credit:
// the transport reads the next message only when Python has asked for it,
// so a client that sends faster than its handler reads is held back by
// HTTP/2 flow control instead of filling the server's memory. Python takes
// them one of two ways, chosen by its first request on the call:
//
//   - as events (Calls.RequestMessages(id, n)): n more messages, each an
//     EventMessage in the main queue, then one EventHalfClose; for event
//     loops and the low-level API's one-thread servers;
//   - by pulling (Calls.Read): a blocking read from the handler's own
//     thread, with a read-ahead of pullWindow messages; for thread-per-call
//     servers, which then need no thread to sort events between calls.
//
// Mixing the two on one call is refused.

// pullWindow is how many messages a pulled request stream reads ahead of
// the handler: enough to overlap the next read with the handler's work,
// small enough to bound a call's memory (pullWindow times the receive
// size limit).
const pullWindow = 2

type delivery uint8

const (
	deliveryUnset  delivery = iota
	deliveryEvents          // RequestMessages: EventMessage and EventHalfClose
	deliveryPull            // Read
)

// requestStream is one call's request stream on the front's side: the
// RequestSink its transport pushes messages to, and what Python takes them
// from. Its fields are guarded by mu.
type requestStream struct {
	c      *call
	events *Events
	st     ServerStream

	mu   sync.Mutex
	mode delivery
	// closed: the call has ended; later messages are dropped (so none is
	// queued after the call's EventCancel).
	closed bool
	// Pulled messages waiting for Read; eof: the end of the stream came
	// after them (Read then reports it, every time).
	inbox []mem.BufferSlice
	eof   bool
	// arrived holds a token while a pull may find something new.
	arrived chan struct{}
}

func newRequestStream(c *call, events *Events, st ServerStream) *requestStream {
	return &requestStream{c: c, events: events, st: st, arrived: make(chan struct{}, 1)}
}

// Message is the transport handing over one message read under credit.
func (r *requestStream) Message(b mem.BufferSlice) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		b.Free()
		return
	}
	if r.mode == deliveryPull {
		r.inbox = append(r.inbox, b)
		signal(r.arrived)
		return
	}
	c := r.c
	r.events.push(Event{Kind: EventMessage, CallID: c.id, MethodID: c.methodID, Payload: b, ClientKey: c.clientKey, call: c})
}

// End is the transport reporting the end of the request stream.
func (r *requestStream) End(err error) {
	if err != nil {
		if st, ok := status.FromError(err); ok && r.c.ctx.Err() == nil {
			// A message the transport refused (size limit, bad
			// compression): the call ends with its status.
			r.c.ops.put(op{kind: opRefused, code: st.Code(), details: st.Message()}, true, r.c.ended)
		}
		return // otherwise the call ended on the wire, and its owner saw it
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if r.mode == deliveryPull {
		r.eof = true
		signal(r.arrived)
		return
	}
	c := r.c
	r.events.push(Event{Kind: EventHalfClose, CallID: c.id, MethodID: c.methodID, ClientKey: c.clientKey, call: c})
}

// close drops what was not taken; called when the call ends.
func (r *requestStream) close() {
	r.mu.Lock()
	r.closed = true
	for _, b := range r.inbox {
		b.Free()
	}
	r.inbox = nil
	r.mu.Unlock()
	signal(r.arrived)
}

// setMode makes the stream deliver one way; false if it already delivers
// the other way. Called with mu held.
func (r *requestStream) setMode(m delivery) bool {
	if r.mode == deliveryUnset {
		r.mode = m
		if m == deliveryPull {
			r.st.Credit(pullWindow)
		}
	}
	return r.mode == m
}

// errNotRequestStream and errMixedDelivery are misuses of RequestMessages
// and Read.
func errNotRequestStream(id uint64) error {
	return configErrorf("call %d has no request stream (its method is not client-streaming)", id)
}

func errMixedDelivery(id uint64, m delivery) error {
	if m == deliveryPull {
		return configErrorf("call %d's messages are read with read_message; request_messages can't be mixed with it", id)
	}
	return configErrorf("call %d's messages are delivered as events (request_messages); read_message can't be mixed with it", id)
}

// RequestMessages lets Go read n more request messages of a
// client-streaming call, each delivered as an EventMessage, and after the
// last one an EventHalfClose (which takes a credit too).
func (cs *Calls) RequestMessages(id uint64, n int) (Result, error) {
	if n < 1 {
		return ResultOK, configErrorf("request_messages needs a count of at least 1, got %d", n)
	}
	c, r := cs.table.lookup(id)
	if r != ResultOK {
		return r, nil
	}
	rs := c.requests
	if rs == nil {
		return ResultOK, errNotRequestStream(id)
	}
	rs.mu.Lock()
	ok := rs.setMode(deliveryEvents)
	rs.mu.Unlock()
	if !ok {
		return ResultOK, errMixedDelivery(id, deliveryPull)
	}
	rs.st.Credit(n)
	return ResultOK, nil
}

// Read takes the next request message of a client-streaming call, waiting
// for it when block is set (ResultWouldBlock otherwise); eof reports that
// the client has half-closed and sent everything. ResultEnded: the call
// has ended (cancelled, deadline, finished). The caller owns msg.
func (cs *Calls) Read(id uint64, block bool) (msg mem.BufferSlice, eof bool, r Result, err error) {
	c, r := cs.table.lookup(id)
	if r != ResultOK {
		return nil, false, r, nil
	}
	rs := c.requests
	if rs == nil {
		return nil, false, ResultOK, errNotRequestStream(id)
	}
	for {
		rs.mu.Lock()
		if !rs.setMode(deliveryPull) {
			rs.mu.Unlock()
			return nil, false, ResultOK, errMixedDelivery(id, deliveryEvents)
		}
		if rs.closed {
			rs.mu.Unlock()
			return nil, false, ResultEnded, nil
		}
		if len(rs.inbox) > 0 {
			msg = rs.inbox[0]
			rs.inbox[0] = nil
			rs.inbox = rs.inbox[1:]
			rs.mu.Unlock()
			rs.st.Credit(1)
			return msg, false, ResultOK, nil
		}
		eof = rs.eof
		rs.mu.Unlock()
		if eof {
			return nil, true, ResultOK, nil
		}
		if !block {
			return nil, false, ResultWouldBlock, nil
		}
		select {
		case <-rs.arrived:
		case <-c.ended:
			return nil, false, ResultEnded, nil
		}
	}
}
