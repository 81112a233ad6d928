package front

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// stream is one call as its owner serves it: Python's ops applied, in
// order, to the transport's stream, until the call ends. The owner is the
// goroutine in serve, or for a driven call whoever holds the right to drive
// it (opQueue.driving); one at a time, so nothing here is locked.
type stream struct {
	h   *handler
	c   *call
	out ServerStream
	// Driven calls only: the ops being applied (reused).
	batch []op
	// batchBuf is batch's first backing array, so that a call whose ops
	// come one at a time (a unary answer) takes them without allocating
	// (call.newStream).
	batchBuf [1]op
}

// serve applies Python's ops to the call until Python finishes it, routes
// it, or the call ends on its own (cancel, deadline, lost connection,
// server stop).
func (s *stream) serve() error {
	batch := s.batchBuf[:0]
	for {
		select {
		case <-s.c.ops.ready:
			batch = s.c.ops.take(batch[:0])
			if s.endedForPython() {
				return s.abandon(s.c.ctx.Err())
			}
			for _, o := range batch {
				if err, done := s.apply(o); done {
					return err
				}
			}
			s.out.Flush()
		case <-s.c.ctx.Done():
			return s.abandon(s.c.ctx.Err())
		}
	}
}

// apply performs one op; done reports that the call is over (on this
// stream: a routed call goes on as its method).
func (s *stream) apply(o op) (err error, done bool) {
	c := s.c
	switch o.kind {
	case opHeader:
		// A second send is refused by the transport; Python's layer
		// reports that to the user, so the error needs no status here.
		_ = s.out.SendHeader(o.md)
		return nil, false
	case opMessage:
		if c.unary {
			if c.holdsReply {
				return s.failed(status.Error(codes.Internal, detailsSecondMessage)), true
			}
			c.heldReply, c.holdsReply = o.message, true
			return nil, false
		}
		if err := s.send(o.message); err != nil {
			if err == errSendWouldWait {
				return err, false
			}
			return s.failedMidCall(err), true
		}
		return nil, false
	case opRoute:
		// Only a call waiting for its lookup can be routed, once.
		if !c.awaitingRoute.CompareAndSwap(true, false) {
			return nil, false
		}
		return s.h.route(s.out, c, o.routeTo), true
	case opCompression:
		s.out.SetCompressor(o.details)
		return nil, false
	case opUncompressedNext:
		c.uncompressedNext = true
		return nil, false
	case opCancel:
		s.h.calls.end(c, outcomeCancelled)
		return status.Error(codes.Canceled, "CANCELLED"), true
	case opAbort:
		// The front ends the call (its status goes to the client); Python
		// learns that the call ended, as for a cancel.
		watched, seen := s.h.calls.end(c, outcomeCancelled)
		s.h.events.cancelled(c, watched, seen)
		return status.Error(o.code, o.details), true
	}
	return s.finish(o), true
}

// finish performs an opFinish: the last message, if any, the trailers and
// the status. The message goes out whatever the code, as grpcio's servers
// send a message with a status a handler set (grpc.server() the one its
// handler returned, grpc.aio an empty one): a client then has the
// response headers, and retries nothing.
func (s *stream) finish(o op) error {
	c := s.c
	msg, has := o.message, o.hasMessage
	if c.unary && !has {
		// The message sent earlier, if any. Without one the call ends
		// with no message (Trailers-Only), as grpcio's does.
		msg, has = c.heldReply, c.holdsReply
	} else if c.unary && c.holdsReply {
		return s.failed(status.Error(codes.Internal, detailsSecondMessage))
	}
	if has {
		if err := s.send(msg); err != nil {
			if err == errSendWouldWait {
				return err // nothing done: the op is tried again
			}
			return s.failed(err)
		}
	}
	var st *status.Status // nil: OK with no details, without allocating one per call
	if o.code != codes.OK || o.details != "" {
		st = status.New(o.code, o.details)
	}
	// The call ends for Python before its status goes out, so that once a
	// client has its answer, ops on the call report ResultEnded.
	s.h.calls.end(c, outcomeCompleted)
	s.out.Finish(st, o.md)
	return nil
}

// send writes one message, uncompressed if Python asked so for this one.
func (s *stream) send(b mem.BufferSlice) error {
	uncompressed := s.c.takeUncompressedNext()
	err := sendMessage(s.out, b, uncompressed, s.h.cfg.Limits.MaxSendMsgSize)
	if err == errSendWouldWait {
		s.c.uncompressedNext = uncompressed // for the send's retry
	}
	return err
}

// sendMessage writes one message, enforcing grpc.max_send_message_length
// (limit) with grpcio's wording (the prefix included); uncompressed sends
// it so in a compressed call. The transport frees b once written.
func sendMessage(out ServerStream, b mem.BufferSlice, uncompressed bool, limit int) error {
	if n := b.Len(); n > limit {
		b.Free()
		return status.Error(codes.ResourceExhausted, fmt.Sprintf("SERVER: Sent message larger than max (%d vs. %d)", n, limit))
	}
	return out.SendMessage(b, uncompressed)
}

// failed ends a call whose answer could not be written. A status error is
// the server's verdict (e.g. too large) and goes to the client; the call
// counts as completed. Anything else means the stream is gone, which
// Python learns as a cancellation.
func (s *stream) failed(err error) error {
	if _, ok := status.FromError(err); ok && s.c.ctx.Err() == nil {
		s.h.calls.end(s.c, outcomeCompleted)
		return err
	}
	return s.abandon(err)
}

// failedMidCall is failed for a message sent before the call's finish:
// Python has not finished the call, so a watcher (Calls.Watch) hears of
// its end, as of a cancellation (server() then runs the call's
// callbacks); the main queue still gets nothing, as documented.
func (s *stream) failedMidCall(err error) error {
	if _, ok := status.FromError(err); ok && s.c.ctx.Err() == nil {
		if watched, seen := s.h.calls.end(s.c, outcomeCompleted); watched {
			s.h.events.cancelled(s.c, watched, seen)
		}
		return err
	}
	return s.abandon(err)
}

// abandon ends a call Python did not finish and tells Python so
// (Events.cancelled).
func (s *stream) abandon(cause error) error {
	o := abandonedOutcome(s.c.ctx, cause)
	watched, seen := s.h.calls.end(s.c, o)
	s.h.events.cancelled(s.c, watched, seen)
	if o == outcomeDeadline {
		return deadlineStatus.Err()
	}
	return status.Error(codes.Canceled, "Cancelled")
}

// A driven call (a transport with no goroutine per call, inlineStream) has
// no goroutine waiting in serve: its ops are applied by whoever queues one
// and finds nobody applying them (opQueue.put runs drive), which is most
// often the Python thread that answers, so a reply goes from Python to the
// socket with no goroutine in between. The call's end on the wire is acted
// on the same way: the transport tells the call's opQueue
// (inlineStream.NotifyEnd, opQueue.wireEnded), which drives the call on a
// goroutine of its own if nobody is driving it; a call with a deadline of
// its own is also watched with a context callback (opQueue.abandon).
//
// A driver never waits: an op the transport can't take at once (a message
// beyond the client's flow-control window) hands the call to a goroutine
// (driveWaiting) that applies it and what follows, waiting as serve does,
// until the queue is empty again.

// inlineStream is a ServerStream whose calls can be driven.
type inlineStream interface {
	ServerStream
	// WriteBy says who writes to the socket the frames of the sends that
	// follow, up to its next call: by default the sender (a thread), or,
	// for an event loop's sends, a goroutine of the transport's own
	// (by.flusher) or the loop itself at its next flush (by.held). Each
	// driver says it before it applies ops.
	WriteBy(by writeBy)
	// End ends a driven call, once, when its driver is done with it: with
	// err's status unless Finish already ended it (nil err: nothing more
	// to send), or with a reset if the call already ended on the wire.
	End(err error)
	// NotifyEnd has h told, once, when the call ends on the wire: when
	// Context ends, whatever the reason (reset, deadline, lost connection,
	// server stop, the call's own end), and at once if it already has. The
	// transport tells it on one of its own goroutines or on the owner's
	// (from Finish or End), holding none of its locks; h must not wait.
	// This replaces a context.AfterFunc on Context, which costs a driven
	// call several allocations.
	NotifyEnd(h wireEndHook)
}

// wireEndHook is told that a driven call ended on the wire
// (inlineStream.NotifyEnd).
type wireEndHook interface {
	wireEnded()
}

// errDriven is what handler.serve returns for a call it left to be driven:
// the transport must not end it (inlineStream.End will).
var errDriven = errors.New("front: the call is driven by its ops")

// driven makes c's ops drive the call from now on; called before its first
// event is queued. The call's end on the wire reaches the queue
// (opQueue.wireEnded) through the transport's end hook; a call with a
// deadline of its own (c.stop set, or an own context) also needs its
// context watched: no transport tells that end (on grpc-go's it comes
// deadlineMargin before the client's).
func (s *stream) driven() {
	s.c.ops.driver = s
	if s.c.stop != nil || s.c.ownsDeadline() {
		s.c.watchEnd()
	}
	s.out.(inlineStream).NotifyEnd(&s.c.ops)
}

// drive applies c's queued ops until none is left, the call ends, or an op
// would wait (then a goroutine takes over). Run by opQueue with the right
// to drive; by: who writes its frames (inlineStream.WriteBy).
func (s *stream) drive(by writeBy) { s.applyQueued(false, by) }

// driveWaiting is drive on a goroutine of its own, which may wait for flow
// control; it stops driving once the queue is empty.
func (s *stream) driveWaiting() { s.applyQueued(true, writeBy{}) }

// applyQueued is drive (mayWait false) and driveWaiting (true).
func (s *stream) applyQueued(mayWait bool, by writeBy) {
	by.noWait = !mayWait
	s.out.(inlineStream).WriteBy(by)
	for {
		batch, abandoned, ok := s.c.ops.takeDriven(s.batch[:0])
		if !ok {
			// The right to drive is given up: another driver may be using
			// s.batch already, so it isn't written here.
			return
		}
		s.batch = batch
		if abandoned || s.endedForPython() {
			s.end(s.abandon(s.c.ctx.Err()))
			return
		}
		for i, o := range batch {
			err, done := s.apply(o)
			if err == errSendWouldWait {
				// o's message can't go without waiting (only a driver that
				// may not wait is told so): nothing of it was sent, and a
				// goroutine that may wait sends it and what follows.
				s.handOver(batch[i:])
				return
			}
			if done {
				clear(batch[i+1:])
				s.end(err)
				return
			}
		}
		clear(batch)
		s.out.Flush()
	}
}

// handOver gives the ops left of a batch, the first of which can't be
// sent without waiting, to a goroutine that may wait (driveWaiting).
func (s *stream) handOver(left []op) {
	s.out.Flush()
	s.c.ops.requeue(left)
	clear(s.batch)
	go s.driveWaiting()
}

// errSendWouldWait is a driven call's send that could not go at once
// (writeBy.noWait): nothing of the message was sent, and the
// caller still owns it.
var errSendWouldWait = errors.New("front: the send would wait for the peer")

// endedForPython reports that the call's context has ended, which
// Calls.IsActive has been telling Python since: no op takes effect from
// then on, even before what acts on the end (opQueue.abandon, on a
// goroutine of its own) has run, so that a handler that answers once
// is_active() is False never reaches the client, as with grpcio.
func (s *stream) endedForPython() bool { return s.c.ctx.Err() != nil }

// end releases a driven call after its last op.
func (s *stream) end(err error) {
	s.c.ops.close()
	s.out.(inlineStream).End(err)
}
