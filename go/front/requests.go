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
//   - by pulling (Calls.Read): the handler's own thread takes the next
//     message, or asks to be woken when there is one; for thread-per-call
//     servers, which then need no thread to sort events between calls. Go
//     reads ahead of a pulling handler while less than pullAheadBytes and
//     pullAheadMessages wait for it, so a stream of small messages flows
//     without a wait per message, and a call holds at most that much plus
//     one message. With a fixed window (Limits.FixedWindow) it reads one
//     message ahead, so that what a client can send ahead of its handler
//     is the window and a message, as on grpcio.
//
// Mixing the two on one call is refused.

// The read-ahead of a pulled request stream (see above).
const (
	pullAheadBytes    = 64 << 10
	pullAheadMessages = 64
)

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
	// holdRefusal: Config.HoldRefusals, for a stream taken as events.
	holdRefusal bool
	// aheadMessages: how many pulled messages may wait for Read.
	aheadMessages int

	mu   sync.Mutex
	mode delivery
	// closed: the call has ended; later messages are dropped (so none is
	// queued after the call's EventCancel).
	closed bool
	// Pulled messages waiting for Read, and their bytes; eof: the end of
	// the stream came after them (Read then reports it, every time).
	inbox      []mem.BufferSlice
	inboxBytes int
	eof        bool
	// refused: the transport refused a message (size limit, bad
	// compression) that came after the inbox's (pulled, whether the inbox
	// holds any or not), or after the events already pushed
	// (holdRefusal): the call ends with its status once the handler has
	// read those and asks for the next, as grpcio's ends it only when its
	// handler asks for the refused message (ended at once, the messages
	// read ahead were lost, and a handler busy sending lost its answer).
	refused error
	// reading: a pull credit is out (the transport is reading the next
	// message for the inbox).
	reading bool
	// wake, set by a Read that found nothing, is called once when something
	// arrives (a message, the end, or the call's end): taken under mu,
	// called after mu is released, so the woken thread's next Read doesn't
	// find mu still held (on a Python thread, a contended lock parks the
	// thread in Go and costs a P hand-off and two more context switches).
	wake func()
}

func newRequestStream(c *call, events *Events, st ServerStream, cfg *Config) *requestStream {
	ahead := pullAheadMessages
	if cfg.Limits.FixedWindow {
		ahead = 1
	}
	return &requestStream{c: c, events: events, st: st, holdRefusal: cfg.HoldRefusals, aheadMessages: ahead}
}

// readAhead gives the transport one more pull credit if the inbox has room
// and none is out. Called with mu held.
func (r *requestStream) readAhead() {
	if r.reading || r.eof || r.closed || r.inboxBytes >= pullAheadBytes || len(r.inbox) >= r.aheadMessages {
		return
	}
	r.reading = true
	r.st.Credit(1)
}

// takeWake clears the pending wake and returns it (a no-op if there was
// none), for the caller to call once mu is released. Called with mu held.
func (r *requestStream) takeWake() func() {
	w := r.wake
	if w == nil {
		return func() {}
	}
	r.wake = nil
	return w
}

// Message is the transport handing over one message read under credit.
func (r *requestStream) Message(b mem.BufferSlice) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		b.Free()
		return
	}
	if r.mode == deliveryPull {
		r.inbox = append(r.inbox, b)
		r.inboxBytes += b.Len()
		r.reading = false
		r.readAhead()
		wake := r.takeWake()
		r.mu.Unlock()
		wake()
		return
	}
	c := r.c
	r.events.push(Event{Kind: EventMessage, CallID: c.id, MethodID: c.methodID, Payload: b, ClientKey: c.clientKey, call: c})
	r.mu.Unlock()
}

// End is the transport reporting the end of the request stream.
func (r *requestStream) End(err error) {
	if err != nil {
		if _, ok := status.FromError(err); ok && r.c.ctx.Err() == nil {
			// A message the transport refused (size limit, bad
			// compression): the call ends with its status once a pulling
			// handler asks for it, after what came before it, as grpcio's
			// ends it only when its handler reads that far. A handler busy
			// elsewhere (nothing in the inbox, nobody waiting in Read)
			// answers as it likes meanwhile; one waiting in Read is woken
			// to meet the refusal at once.
			r.mu.Lock()
			switch {
			case r.closed:
			case r.mode == deliveryPull:
				r.refused, r.eof, r.reading = err, true, false
				wake := r.takeWake()
				r.mu.Unlock()
				wake()
				return
			case r.mode == deliveryEvents && r.holdRefusal:
				// Python learns it as the stream's end, after the
				// messages before it; RequestMessages past it ends the
				// call.
				r.refused = err
				r.pushHalfClose()
				r.mu.Unlock()
				return
			}
			r.mu.Unlock()
			r.abort(err)
		}
		return // otherwise the call ended on the wire, and its owner saw it
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	if r.mode == deliveryPull {
		r.eof, r.reading = true, false
		wake := r.takeWake()
		r.mu.Unlock()
		wake()
		return
	}
	r.pushHalfClose()
	r.mu.Unlock()
}

// pushHalfClose queues the stream's EventHalfClose. Called with mu held.
func (r *requestStream) pushHalfClose() {
	c := r.c
	r.events.push(Event{Kind: EventHalfClose, CallID: c.id, MethodID: c.methodID, ClientKey: c.clientKey, call: c})
}

// abort ends the call with err's status (a refused message's).
func (r *requestStream) abort(err error) {
	st, _ := status.FromError(err)
	r.c.ops.put(op{kind: opAbort, code: st.Code(), details: st.Message()}, true, writeBy{}, &r.c.ended)
}

// close drops what was not taken; called when the call ends.
func (r *requestStream) close() {
	r.mu.Lock()
	r.closed = true
	for _, b := range r.inbox {
		b.Free()
	}
	r.inbox, r.inboxBytes = nil, 0
	wake := r.takeWake()
	r.mu.Unlock()
	wake()
}

// setMode makes the stream deliver one way; false if it already delivers
// the other way. Called with mu held.
func (r *requestStream) setMode(m delivery) bool {
	if r.mode == deliveryUnset {
		r.mode = m
		if m == deliveryPull {
			r.readAhead()
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
// last one an EventHalfClose (which takes a credit too). Past an
// EventHalfClose that stood for a refused message (Config.HoldRefusals)
// it ends the call with the refusal's status and reports ResultEnded.
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
	refused := rs.refused
	rs.refused = nil
	rs.mu.Unlock()
	if !ok {
		return ResultOK, errMixedDelivery(id, deliveryPull)
	}
	if refused != nil {
		rs.abort(refused)
		return ResultEnded, nil
	}
	rs.st.Credit(n)
	return ResultOK, nil
}

// Read takes the next request message of a client-streaming call; eof
// reports that the client has half-closed and everything was read.
// ResultEnded: the call has ended (cancelled, deadline, finished). When
// nothing is there yet it reports ResultWouldBlock and, if wake is not nil,
// calls wake once (from another goroutine, possibly before Read returns)
// when something may be: the caller then reads again. The caller owns msg.
func (cs *Calls) Read(id uint64, wake func()) (msg mem.BufferSlice, eof bool, r Result, err error) {
	c, r := cs.table.lookup(id)
	if r != ResultOK {
		return nil, false, r, nil
	}
	if c.cancelAsked.Load() {
		// Python cancelled the call: the messages read ahead are not
		// handed out while the cancel makes its way (on grpc-go's
		// transport it ends the call later), as grpcio's iterator raises
		// at the next read after its handler's cancel().
		return nil, false, ResultEnded, nil
	}
	rs := c.requests
	if rs == nil {
		return nil, false, ResultOK, errNotRequestStream(id)
	}
	previous := func() {}
	var refused error
	rs.mu.Lock()
	defer func() {
		rs.mu.Unlock()
		previous()
		if refused != nil {
			rs.abort(refused)
		}
	}()
	if !rs.setMode(deliveryPull) {
		return nil, false, ResultOK, errMixedDelivery(id, deliveryEvents)
	}
	switch {
	case rs.closed:
		return nil, false, ResultEnded, nil
	case len(rs.inbox) > 0:
		msg = rs.inbox[0]
		rs.inbox[0] = nil
		rs.inbox = rs.inbox[1:]
		rs.inboxBytes -= msg.Len()
		rs.readAhead()
		return msg, false, ResultOK, nil
	case rs.refused != nil:
		refused, rs.refused = rs.refused, nil
		return nil, false, ResultEnded, nil
	case rs.eof:
		return nil, true, ResultOK, nil
	}
	previous = rs.takeWake() // a reader in another thread, if any, reads again too
	rs.wake = wake
	return nil, false, ResultWouldBlock, nil
}

// ReadWait is Read waiting for the next message (or the end of the stream,
// or of the call), for callers in Go.
func (cs *Calls) ReadWait(id uint64) (msg mem.BufferSlice, eof bool, r Result, err error) {
	for {
		ready := make(chan struct{}, 1)
		msg, eof, r, err = cs.Read(id, func() { signal(ready) })
		if r != ResultWouldBlock || err != nil {
			return msg, eof, r, err
		}
		<-ready
	}
}
