package front

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
)

// Calls is Python's side of a front's live calls: the call table, and the
// operations Python's threads perform on one call by its id. An operation
// never touches grpc-go: it is posted as an op to the goroutine that owns
// the call (see call), which performs it in order. Any thread may call
// these, concurrently.
type Calls struct {
	table   callTable
	methods *methodTable
	// events is where the calls' events go; end asks it whether Python saw
	// a call.
	events *Events
	// slots are maximum_concurrent_rpcs's places; with holdSlots a call
	// Python saw keeps its place until Python's handler is done
	// (HandlerDone), not only until the call ends on the wire.
	slots     slots
	holdSlots bool
	// hasFallback: Route may relay calls to a fallback server.
	hasFallback bool
	// levelSet: the server's compression level overrides each call's own
	// choice (SetCompression), as in grpcio.
	levelSet bool
	// loopSenders: Python sends on these calls from an event loop, which
	// leaves every socket write to the connection (SetLoopSenders).
	loopSenders atomic.Bool
	// held lists the connections holding an event loop's frames
	// (SendHeld) until FlushHeld.
	held heldWrites
	// endedDetails: the details of the last calls that ended before
	// Python answered them.
	endedDetails endedDetails
	// sendLimit is Limits.MaxSendMsgSize where Config.RaiseSendLimit
	// asks that a send over it say so (ResultTooLarge); -1 otherwise.
	sendLimit int
	m         *metrics
}

// SetLoopSenders says whether Python's sends come from an event loop. A
// SendNoWait send is then written to the socket by the connection's
// flusher, so that the loop goes on at once (a SendHeld one, by the loop
// itself at its next turn); from a thread (the default), such a send that
// finds the connection idle writes its answer itself, which costs no
// wake-up (the low-level API answering 4,000 paced calls/s: about 10% less
// CPU and one context switch less per call). Either way nothing waits for
// the peer.
func (cs *Calls) SetLoopSenders(on bool) { cs.loopSenders.Store(on) }

// FlushHeld writes out the frames of every SendHeld send so far. The
// event loop that sends them calls it once per turn, before it waits for
// I/O again; the front calls it when it stops.
func (cs *Calls) FlushHeld() { cs.held.flush() }

// Result is the outcome of an operation on a call, by id.
type Result int

const (
	// ResultOK: the op was handed to the call.
	ResultOK Result = iota
	// ResultEnded: the call already ended (finished, cancelled, deadline
	// passed); the op was dropped. This is a normal race, not an error.
	ResultEnded
	// ResultUnknown: this front never issued the id.
	ResultUnknown
	// ResultWouldBlock: the call's op buffer is full; retry with SendWait.
	ResultWouldBlock
	// ResultStopped: the front has stopped; every call has ended.
	ResultStopped
	// ResultTooLarge: the op's message is over the send limit; the op was
	// handed to the call, which it ends RESOURCE_EXHAUSTED once what was
	// sent before it is out. Only with Config.RaiseSendLimit (otherwise
	// such an op is ResultOK, and only the client learns of the limit).
	ResultTooLarge
)

// errNoFallback is a fallback route on a front created without one.
var errNoFallback = configErrorf("this front has no fallback server")

// detailsInvalidMetadata is what grpcio's client gets for response
// metadata gRPC can't carry.
const detailsInvalidMetadata = "Invalid metadata"

// Ending is how Python ends a call (Finish).
type Ending struct {
	Code    codes.Code
	Details string
	// Trailer is the trailing metadata, in order.
	Trailer Metadata
	// Message, when HasMessage, is a last message, sent only with code OK.
	// The call owns it from here on (grpc-go frees pooled buffers once
	// they are written).
	Message    mem.BufferSlice
	HasMessage bool
}

// outcome is how a call Python saw ended; every started call ends with
// exactly one (the calls_* metrics).
type outcome uint8

const (
	outcomeCompleted outcome = iota // Python finished it, or routed it to the fallback
	outcomeCancelled                // client, Python, lost connection or server stop
	outcomeDeadline                 // its deadline passed first
)

// start makes c live, with a new id; its slot is already taken.
func (cs *Calls) start(c *call) {
	cs.table.add(c)
	cs.m.callsActive.Add(1)
	cs.m.callsStarted.Add(1)
}

// end forgets a call and counts its outcome. It reports whether Python
// watches it, and whether Python has seen it: a call Python never saw is
// never shown to it (its queued events are dropped), and gives its slot
// back at once, as does a call whose EventCall Python never took (a
// looked-up call that ended before it: no handler runs for it, so none
// will say HandlerDone). Ops that Python sends afterwards report
// ResultEnded.
//
// A call Python completed was called by it; unless it has a request
// stream (whose queued messages must be dropped), end doesn't ask the
// event queue, whose lock every call would otherwise take once more.
func (cs *Calls) end(c *call, o outcome) (watched, seen bool) {
	if c.stop != nil || c.ownsDeadline() { // a deadline: see call.watchEnd
		c.unwatchEnd()
		c.endContext()
	}
	seen, called := true, true
	if o != outcomeCompleted || c.requests != nil {
		seen, called = cs.events.main.endUnseen(c)
	}
	if seen && o != outcomeCompleted {
		cs.endedDetails.keep(c)
	}
	watched, slotFree := cs.table.remove(c, cs.holdSlots && called)
	if c.requests != nil {
		c.requests.close()
	}
	c.ended.fire()
	if slotFree {
		cs.slots.give()
	}
	cs.m.callsActive.Add(-1)
	cs.m.countOutcome(o)
	return watched, seen
}

// HandlerDone tells a front that holds slots (Config.HoldSlots) that
// Python's handler of a call has returned: the call's place under
// maximum_concurrent_rpcs is given back once the call has also ended on
// the wire. Without HoldSlots it changes nothing. ResultEnded: the call
// had already ended and holds no place (HandlerDone said twice, or the
// front doesn't hold slots).
func (cs *Calls) HandlerDone(id uint64) Result {
	slotFree, found := cs.table.handlerDone(id)
	if slotFree {
		cs.slots.give()
	}
	if found {
		return ResultOK
	}
	_, r := cs.table.lookup(id)
	return r
}

// post hands an op to a call, as how says (Sending).
func (cs *Calls) post(id uint64, o op, how Sending) Result {
	c, r := cs.table.lookup(id)
	if r != ResultOK {
		return r
	}
	return cs.postTo(c, o, how)
}

// postTo is post for a call already looked up. A call Python cancelled,
// or whose context has ended (over on the wire, not yet out of the table:
// IsActive), takes no op but a cancel: ResultEnded, as once it has ended.
func (cs *Calls) postTo(c *call, o op, how Sending) Result {
	if o.kind != opCancel && (c.cancelAsked.Load() || c.ctx.Err() != nil) {
		return ResultEnded
	}
	var by writeBy
	switch {
	case how == SendHeld:
		by.held = &cs.held
	case how == SendNoWait:
		by.flusher = cs.loopSenders.Load()
	}
	return c.ops.put(o, how == SendWait, by, &c.ended)
}

// Respond answers a unary call with one message and status OK. The
// message belongs to the call from here on (grpc-go frees pooled buffers
// once they are written).
func (cs *Calls) Respond(id uint64, message mem.BufferSlice, how Sending) Result {
	over := cs.overLimit(message)
	return sentOver(cs.post(id, op{kind: opFinish, message: message, hasMessage: true}, how), over)
}

// Send sends one message on a call; the message is the call's, as in
// Respond.
func (cs *Calls) Send(id uint64, message mem.BufferSlice, how Sending) Result {
	over := cs.overLimit(message)
	return sentOver(cs.post(id, op{kind: opMessage, message: message}, how), over)
}

// overLimit reports a message over the send limit on a front that says so
// (Config.RaiseSendLimit). Read before the message is posted: from there
// the call owns it, and may have freed it. The call itself ends at that
// message as on any front (sendMessage), in order with the ops before it.
func (cs *Calls) overLimit(message mem.BufferSlice) bool {
	return cs.sendLimit >= 0 && message.Len() > cs.sendLimit
}

// sentOver is the result of posting a message that over says is over the
// limit: ResultTooLarge once the op was handed to the call.
func sentOver(r Result, over bool) Result {
	if over && r == ResultOK {
		return ResultTooLarge
	}
	return r
}

// SendHeader sends initial metadata. Invalid metadata ends the call with
// INTERNAL "Invalid metadata", as with grpcio, and is reported as err. A
// second send on the same call is refused, with ErrInitialMetadataAgain
// and nothing queued: the transport would drop it, and the caller would
// not know (grpcio's context raises there too).
func (cs *Calls) SendHeader(id uint64, md Metadata, how Sending) (Result, error) {
	if err := validateMetadata(md); err != nil {
		return cs.post(id, op{kind: opFinish, code: codes.Internal, details: detailsInvalidMetadata}, how), err
	}
	c, r := cs.table.lookup(id)
	if r != ResultOK {
		return r, nil
	}
	if !c.ops.claimHeader() {
		return ResultOK, fmt.Errorf("%w: call %d already sent it (send_initial_metadata() works once per call)", ErrInitialMetadataAgain, id)
	}
	r = cs.postTo(c, op{kind: opHeader, md: md}, how)
	if r == ResultWouldBlock {
		c.ops.unclaimHeader() // its retry sends it
	}
	return r, nil
}

// ErrInitialMetadataAgain is SendHeader's error for a call's second send
// of initial metadata.
var ErrInitialMetadataAgain = errors.New("initial metadata no longer allowed")

// Finish ends a call as e says. Invalid trailing metadata ends the call as
// in SendHeader.
func (cs *Calls) Finish(id uint64, e Ending, how Sending) (Result, error) {
	if err := validateMetadata(e.Trailer); err != nil {
		return cs.post(id, op{kind: opFinish, code: codes.Internal, details: detailsInvalidMetadata}, how), err
	}
	over := e.HasMessage && cs.overLimit(e.Message)
	return sentOver(cs.post(id, op{kind: opFinish, code: e.Code, details: e.Details, md: e.Trailer,
		message: e.Message, hasMessage: e.HasMessage}, how), over), nil
}

// Route continues a call that arrived as EventLookup as method methodID,
// or relays it to the fallback server (FallbackMethodID).
func (cs *Calls) Route(id uint64, methodID int32) (Result, error) {
	if methodID == FallbackMethodID {
		if !cs.hasFallback {
			return ResultOK, errNoFallback
		}
	} else if m, ok := cs.methods.get(methodID); !ok || m.Fallback {
		return ResultOK, configErrorf("unknown method id %d", methodID)
	}
	c, r := cs.table.lookup(id)
	if r != ResultOK {
		return r, nil
	}
	if !c.awaitingRoute.Load() {
		return ResultOK, configErrorf("call %d is not waiting for a lookup (EVENT_LOOKUP)", id)
	}
	return c.ops.put(op{kind: opRoute, routeTo: methodID}, true, writeBy{}, &c.ended), nil
}

// WaitRoom waits until a call's buffer has room for another op (a thread's
// way to wait after ResultWouldBlock, without polling); ResultEnded if the
// call ends first.
func (cs *Calls) WaitRoom(id uint64) Result {
	c, r := cs.table.lookup(id)
	if r != ResultOK {
		return r
	}
	if !c.ops.waitRoom(&c.ended) {
		return ResultEnded
	}
	return ResultOK
}

// NotifyRoom queues one EventRoom for a call once its buffer has room for
// another op (at once if it has now): an event loop's way to wait after
// ResultWouldBlock. A call that ends first gets no EventRoom (Python learns
// of its end as usual).
func (cs *Calls) NotifyRoom(id uint64) Result {
	c, r := cs.table.lookup(id)
	if r != ResultOK {
		return r
	}
	c.ops.notifyRoom(func() {
		if c.ended.fired() {
			return
		}
		cs.events.push(Event{Kind: EventRoom, CallID: c.id, MethodID: c.methodID, ClientKey: c.clientKey, call: c})
	})
	return ResultOK
}

// Cancel ends a call with CANCELLED, as grpcio's context.cancel() does.
func (cs *Calls) Cancel(id uint64) Result {
	c, r := cs.table.lookup(id)
	if r != ResultOK {
		return r
	}
	c.cancelAsked.Store(true)
	return cs.postTo(c, op{kind: opCancel}, SendWait)
}

// cancelAll ends every live call with UNAVAILABLE "Cancelling all calls",
// as grpcio's server ends its calls when a stop's grace has passed: each
// call's client gets that status after what was sent before it, and Python
// learns of the end as of a cancel. A call whose queue is full (a client
// that stopped reading), or that Python has not been handed yet, is left to
// the transport's stop.
func (cs *Calls) cancelAll() { cs.abortLive(nil, detailsCancellingAll) }

// cancelConn ends the live calls of one connection (conn) with UNAVAILABLE
// and details, as cancelAll ends every call: how grpcio's server ends the
// calls left when max_connection_age's grace has passed.
func (cs *Calls) cancelConn(conn *connState, details string) { cs.abortLive(conn, details) }

// abortLive is cancelAll (conn nil) and cancelConn.
func (cs *Calls) abortLive(conn *connState, details string) {
	for _, c := range cs.table.live() {
		if c.handedOver.Load() && (conn == nil || c.conn == conn) {
			c.ops.put(op{kind: opAbort, code: codes.Unavailable, details: details}, false, writeBy{}, &c.ended)
		}
	}
}

// Watch sends the call's EventCancel, if it ends without Python finishing
// it, to the watched queue (Events.RecvWatched) instead of the main one.
// It reports ResultEnded for a call that has already ended.
func (cs *Calls) Watch(id uint64) Result {
	if cs.table.watch(id) {
		return ResultOK
	}
	_, r := cs.table.lookup(id)
	if r == ResultOK {
		// It ended between the two looks.
		return ResultEnded
	}
	return r
}

// IsActive reports whether a call is still live.
func (cs *Calls) IsActive(id uint64) (bool, Result) {
	c, r := cs.table.lookup(id)
	switch r {
	case ResultOK:
		// The call's context ends the moment its transport sees the end
		// (a reset, the deadline, the connection lost), which can be well
		// before the goroutine or hook that takes the call out of the
		// table runs: under a flood of resets on grpc-go's transport,
		// Python asked in between and started handlers for reset calls.
		return c.ctx.Err() == nil && !c.cancelAsked.Load(), ResultOK
	case ResultEnded:
		return false, ResultOK
	}
	return false, r
}

// TimeRemaining is the time left before the call's deadline; has is false
// when the client set none. ResultEnded once the call is over on the wire.
func (cs *Calls) TimeRemaining(id uint64) (left time.Duration, has bool, r Result) {
	c, r := cs.table.lookup(id)
	if r != ResultOK {
		return 0, false, r
	}
	if c.ctx.Err() != nil {
		// Over on the wire, still in the table for a moment: ended, as
		// IsActive says (the low-level API reads 0 for it, a context the
		// time its kept details had left).
		return 0, false, ResultEnded
	}
	d, ok := c.ctx.Deadline()
	if !ok {
		return 0, false, ResultOK
	}
	return max(time.Until(d), 0), true, ResultOK
}
