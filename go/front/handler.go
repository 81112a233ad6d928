package front

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Fixed status details, worded as grpcio words them so that clients see the
// same text from either server.
const (
	detailsMethodNotFound   = "Method not found!"
	detailsConcurrencyLimit = "Concurrent RPC limit exceeded!"
	detailsUnauthenticated  = "Missing or invalid bearer token"
	detailsServerStopping   = "Server is shutting down"
	detailsSecondMessage    = "A unary call answers with exactly one message"
)

// deadlineMargin is how much earlier than the client's deadline the server
// ends an unanswered call. grpc-go resets a stream (RST_STREAM CANCEL) the
// moment the deadline passes, and a reset that beats the client's own timer
// reaches the client as CANCELLED; ending the call a little earlier, with
// status DEADLINE_EXCEEDED, gives the client what grpcio's server gives.
const deadlineMargin = 20 * time.Millisecond

// dispatch is grpc-go's handler for every call (grpc.UnknownServiceHandler):
// it routes the call by path through the method table. Every method takes
// grpc-go's streaming path, so one handler and one way of writing answers
// (a ServerStream) serve unary and server-streaming methods alike.
func (f *Front) dispatch(_ any, ss grpc.ServerStream) error {
	ctx := ss.Context()
	if f.state.Load() != stateServing {
		// Stopping: grpc-go's GOAWAY may not have reached this connection
		// yet, but new calls are refused from the moment Stop began.
		return f.refuse(ctx, status.Error(codes.Unavailable, detailsServerStopping))
	}
	f.applyDefaultCompression(ctx)
	path, _ := grpc.MethodFromServerStream(ss)
	if h := f.health.Load(); h != nil && (path == healthCheckPath || path == healthWatchPath) {
		return f.serveHealth(h, ss, path)
	}
	if id, m, ok := f.methods.lookup(path); ok {
		if m.Fallback {
			return f.proxy(ss, path)
		}
		return f.serveMethod(ss, id, nil)
	}
	switch {
	case f.cfg.ResolveUnknown:
		return f.resolve(ss, path)
	case f.fallback != nil:
		return f.proxy(ss, path)
	}
	return f.refuse(ctx, status.Error(codes.Unimplemented, detailsMethodNotFound))
}

// resolve asks Python what an unknown path is (EventLookup) and continues
// the call as the method Python routes it to, or ends it as Python says.
func (f *Front) resolve(ss grpc.ServerStream, path string) error {
	c, err := f.newCall(ss.Context(), path, -1)
	if err != nil {
		return err
	}
	c.lookup.Store(true)
	lookup := Event{Kind: EventLookup, CallID: c.id, MethodID: -1, Payload: mem.BufferSlice{mem.SliceBuffer(path)}, ClientKey: c.clientKey, call: c}
	if err := f.deliver(c, lookup); err != nil {
		return err
	}
	var batch []op
	for {
		select {
		case <-c.ops.ready:
			batch = c.ops.take(batch[:0])
			for _, o := range batch {
				if o.kind == opRoute {
					c.lookup.Store(false)
					if o.method == FallbackMethodID {
						// Python's part ends here: the fallback serves it.
						f.end(c)
						f.m.callsCompleted.Add(1)
						return f.proxy(ss, path)
					}
					return f.serveMethod(ss, o.method, c)
				}
				if err, done := f.apply(c, o, ss); done {
					return err
				}
			}
		case <-c.ctx.Done():
			return f.abandon(c, c.ctx.Err())
		}
	}
}

// serveMethod reads the request, hands the call to Python, then relays
// Python's answer until the call ends. c is the call when it was created by
// a lookup, nil otherwise.
func (f *Front) serveMethod(ss grpc.ServerStream, methodID int32, c *call) error {
	ctx := ss.Context()
	var req mem.BufferSlice
	if err := ss.RecvMsg(&req); err != nil {
		err = requestMissing(ss, err)
		if c != nil {
			// Started when Python saw its lookup, so it ends with an
			// outcome, never as a refusal (metrics invariant).
			f.end(c)
			f.countUnserved(c, err)
			return err
		}
		return f.refuse(ctx, err)
	}
	ev := Event{Kind: EventCall, MethodID: methodID, Payload: req}
	m, _ := f.methods.get(methodID)
	if c == nil {
		var err error
		if c, err = f.newCall(ctx, m.Path, methodID); err != nil {
			req.Free()
			return err
		}
		c.unary = !m.ServerStreaming
		ev.CallID, ev.ClientKey, ev.call = c.id, c.clientKey, c
		if err := f.deliver(c, ev); err != nil {
			req.Free()
			return err
		}
	} else {
		c.methodID, c.unary = methodID, !m.ServerStreaming
		ev.CallID, ev.ClientKey, ev.call = c.id, c.clientKey, c
		if !f.queue.push(ev) {
			req.Free()
			f.end(c)
			f.m.callsCancelled.Add(1) // by the server's stop
			return status.Error(codes.Unavailable, detailsServerStopping)
		}
	}
	return f.serve(c, ss)
}

// requestMissing is the status of a call whose request could not be read
// (err from RecvMsg).
func requestMissing(ss grpc.ServerStream, err error) error {
	if errors.Is(err, io.EOF) {
		// The client half-closed without a request; grpcio's answer.
		path, _ := grpc.MethodFromServerStream(ss)
		return status.Errorf(codes.Unimplemented, "%q requires exactly one request message.", path)
	}
	// Otherwise grpc-go has already sent the client its status (e.g.
	// RESOURCE_EXHAUSTED for a request over the size limit).
	return err
}

// refuse ends a call that never reaches Python.
func (f *Front) refuse(ctx context.Context, err error) error {
	f.m.callsRefused.Add(1)
	if t := ticketFrom(ctx); t != nil {
		t.resolve(f.queue, nil)
	}
	return err
}

// newCall registers a call, unless the concurrency limit refuses it.
func (f *Front) newCall(ctx context.Context, path string, methodID int32) (*call, error) {
	if limit := f.cfg.MaxConcurrentRPCs; limit > 0 && f.m.callsActive.Load() >= int64(limit) {
		return nil, f.refuse(ctx, status.Error(codes.ResourceExhausted, detailsConcurrencyLimit))
	}
	c := &call{
		id:       f.lastID.Add(1),
		methodID: methodID,
		path:     path,
		ctx:      ctx,
		ops:      newOpQueue(),
		ended:    make(chan struct{}),
	}
	if _, ok := ctx.Deadline(); ok {
		c.ctx, c.stop = beforeDeadline(ctx)
	}
	if p, ok := peer.FromContext(ctx); ok {
		c.conn, _ = p.Addr.(*connAddr)
	}
	c.clientKey = clientKeyFrom(ctx, c.conn)
	f.calls.put(c)
	f.m.callsActive.Add(1)
	f.m.callsStarted.Add(1)
	return c, nil
}

// deliver queues a call's first event, in arrival order when the front is
// ordered.
func (f *Front) deliver(c *call, ev Event) error {
	var queued bool
	if t := ticketFrom(c.ctx); t != nil {
		queued = t.resolve(f.queue, &ev)
	} else {
		queued = f.queue.push(ev)
	}
	if !queued {
		f.end(c)
		f.m.callsCancelled.Add(1) // by the server's stop
		return status.Error(codes.Unavailable, detailsServerStopping)
	}
	return nil
}

// end forgets a call and reports whether Python watches it. Ops that
// Python sends afterwards report ResultEnded.
func (f *Front) end(c *call) (watched bool) {
	if c.stop != nil {
		c.stop()
	}
	watched = f.calls.remove(c)
	close(c.ended)
	f.m.callsActive.Add(-1)
	return watched
}

// serve applies Python's ops to the call until Python finishes it or the
// call ends on its own (cancel, deadline, lost connection, server stop).
func (f *Front) serve(c *call, out grpc.ServerStream) error {
	var batch []op
	for {
		select {
		case <-c.ops.ready:
			batch = c.ops.take(batch[:0])
			for _, o := range batch {
				if err, done := f.apply(c, o, out); done {
					return err
				}
			}
		case <-c.ctx.Done():
			return f.abandon(c, c.ctx.Err())
		}
	}
}

// apply performs one op; done reports that the call is over.
func (f *Front) apply(c *call, o op, out grpc.ServerStream) (err error, done bool) {
	switch o.kind {
	case opHeader:
		// A second send is refused by grpc-go; Python's layer reports that
		// to the user, so the error needs no status here.
		_ = out.SendHeader(o.md)
		return nil, false
	case opMessage:
		if c.unary {
			if c.holdsReply {
				return f.failed(c, status.Error(codes.Internal, detailsSecondMessage)), true
			}
			c.held, c.holdsReply = o.payload, true
			return nil, false
		}
		if err := f.send(out, o.payload, c.takeUncompressedNext()); err != nil {
			return f.failed(c, err), true
		}
		return nil, false
	case opRoute:
		// Only a call waiting for its lookup can be routed.
		return nil, false
	case opCompression:
		setCompressor(out.Context(), o.details)
		return nil, false
	case opUncompressedNext:
		c.uncompressedNext = true
		return nil, false
	case opCancel:
		f.end(c)
		f.m.callsCancelled.Add(1)
		return status.Error(codes.Canceled, "CANCELLED"), true
	}
	// opFinish
	if o.code == codes.OK {
		msg, has := o.payload, o.hasPayload
		if c.unary && !has {
			// The message sent earlier, if any. Without one the call ends
			// OK with no message, as grpcio's does.
			msg, has = c.held, c.holdsReply
		} else if c.unary && c.holdsReply {
			return f.failed(c, status.Error(codes.Internal, detailsSecondMessage)), true
		}
		if has {
			if err := f.send(out, msg, c.takeUncompressedNext()); err != nil {
				return f.failed(c, err), true
			}
		}
	}
	if len(o.md) > 0 {
		out.SetTrailer(o.md)
	}
	f.end(c)
	f.m.callsCompleted.Add(1)
	if o.code == codes.OK {
		return nil, true
	}
	return status.Error(o.code, o.details), true
}

// send writes one message, enforcing grpc.max_send_message_length with
// grpcio's wording (the prefix included); uncompressed sends it so in a
// compressed call. grpc-go frees b once written.
func (f *Front) send(out grpc.ServerStream, b mem.BufferSlice, uncompressed bool) error {
	if limit := f.cfg.Limits.MaxSendMsgSize; b.Len() > limit {
		return status.Error(codes.ResourceExhausted, fmt.Sprintf("SERVER: Sent message larger than max (%d vs. %d)", b.Len(), limit))
	}
	if uncompressed {
		return sendUncompressed(out, b)
	}
	return out.SendMsg(b)
}

// failed ends a call whose answer could not be written. A status error is
// the server's verdict (e.g. too large) and goes to the client; anything
// else means the stream is gone, which Python learns as a cancellation.
func (f *Front) failed(c *call, err error) error {
	if _, ok := status.FromError(err); ok && c.ctx.Err() == nil {
		f.end(c)
		f.m.callsCompleted.Add(1)
		return err
	}
	return f.abandon(c, err)
}

// countUnserved counts the outcome of a started call whose request was
// never read (too large, missing, client gone): Python never got to answer
// it, so it counts as cancelled, or as deadline exceeded if that is why.
func (f *Front) countUnserved(c *call, err error) {
	if deadlinePassed(c.ctx, err) {
		f.m.callsDeadlineExceeded.Add(1)
	} else {
		f.m.callsCancelled.Add(1)
	}
}

// abandon ends a call Python did not finish and tells Python so, on the
// watched queue if Python watches the call. A call Python has not seen yet
// (its EventCall still queued) is never handed to Python at all: no handler
// runs for a client that is already gone.
func (f *Front) abandon(c *call, cause error) error {
	watched := f.end(c)
	code := codes.Canceled
	if deadlinePassed(c.ctx, cause) {
		code = codes.DeadlineExceeded
		f.m.callsDeadlineExceeded.Add(1)
	} else {
		f.m.callsCancelled.Add(1)
	}
	if f.queue.endUnseen(c) {
		ev := Event{Kind: EventCancel, CallID: c.id, MethodID: c.methodID, ClientKey: c.clientKey}
		if watched {
			f.watchedQueue.push(ev)
		} else {
			f.queue.push(ev)
		}
	}
	if code == codes.DeadlineExceeded {
		return status.Error(code, "Deadline Exceeded")
	}
	return status.Error(code, "Cancelled")
}

// beforeDeadline is ctx ending deadlineMargin (or a tenth of the time
// left, if less) before its deadline; see deadlineMargin.
func beforeDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	margin := min(deadlineMargin, time.Until(dl)/10)
	return context.WithDeadline(ctx, dl.Add(-margin))
}

// deadlinePassed tells a deadline from a cancellation. grpc-go's own
// deadline timer resets the stream and cancels its context, so ctx.Err() can
// say Canceled for a call whose deadline passed: the clock decides.
func deadlinePassed(ctx context.Context, cause error) bool {
	if errors.Is(cause, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// clientKeyCtx carries the client key a bearer token maps to.
type clientKeyCtx struct{}

// clientKeyFrom says who sent a call: the name its bearer token maps to,
// or without tokens, the peer address of its connection.
func clientKeyFrom(ctx context.Context, conn *connAddr) string {
	if k, ok := ctx.Value(clientKeyCtx{}).(string); ok {
		return k
	}
	if conn != nil {
		return conn.peer
	}
	return ""
}
