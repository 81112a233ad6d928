package front

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
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

// handler is grpc-go's side of a front: it admits each call (tap), routes
// it by path (dispatch), and serves it on the goroutine grpc-go runs it on,
// until it ends. Every call either reaches Python (it is started in Calls
// and ends there with one outcome) or is refused before (counted as
// refused, never started); calls answered natively (health) or relayed to
// the fallback are neither.
type handler struct {
	cfg      *Config
	phase    *phase
	m        *metrics
	methods  *methodTable
	calls    *Calls
	events   *Events
	health   *Health
	fallback *fallbackRelay // nil without a fallback server
}

// tap runs in the connection's reader goroutine, in arrival order, before
// any handler: the place to refuse oversized metadata and bad tokens
// cheaply (only that call ends) and to take an ordering ticket.
func (h *handler) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if err := checkMetadataSize(info.Header, h.cfg.Limits.MaxHeaderListSize); err != nil {
		h.m.callsRefused.Add(1)
		return ctx, err
	}
	if len(h.cfg.BearerTokens) > 0 {
		key, ok := h.authenticate(info.Header)
		if !ok {
			h.m.callsRefused.Add(1)
			return ctx, status.Error(codes.Unauthenticated, detailsUnauthenticated)
		}
		ctx = context.WithValue(ctx, clientKeyCtx{}, key)
	}
	if h.cfg.Ordered {
		if p, ok := peer.FromContext(ctx); ok {
			if cs, ok := p.Addr.(*connState); ok {
				ctx = h.events.takeTicket(ctx, &cs.order)
			}
		}
	}
	return ctx, nil
}

// authenticate finds the client key of the call's bearer token.
func (h *handler) authenticate(md metadata.MD) (string, bool) {
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok {
			if key, ok := h.cfg.BearerTokens[tok]; ok {
				return key, true
			}
		}
	}
	return "", false
}

// dispatch is grpc-go's handler for every call (grpc.UnknownServiceHandler):
// it routes the call by path through the method table. Every method takes
// grpc-go's streaming path, so one handler and one way of writing answers
// (a ServerStream) serve unary and server-streaming methods alike.
func (h *handler) dispatch(_ any, ss grpc.ServerStream) error {
	ctx := ss.Context()
	if h.phase.get() != phaseServing {
		// Stopping: grpc-go's GOAWAY may not have reached this connection
		// yet, but new calls are refused from the moment Stop began.
		return h.refuse(ctx, status.Error(codes.Unavailable, detailsServerStopping))
	}
	h.cfg.Limits.Compression.applyDefault(ctx)
	path, _ := grpc.MethodFromServerStream(ss)
	if t := h.health.answers(path); t != nil {
		h.events.skip(ctx) // this call never reaches Python's queue
		return t.serve(ss, path)
	}
	if id, m, ok := h.methods.lookup(path); ok {
		if m.Fallback {
			return h.relayToFallback(ss, path)
		}
		return h.serveMethod(ss, id, nil)
	}
	switch {
	case h.cfg.ResolveUnknown:
		return h.resolve(ss, path)
	case h.fallback != nil:
		return h.relayToFallback(ss, path)
	}
	return h.refuse(ctx, status.Error(codes.Unimplemented, detailsMethodNotFound))
}

// relayToFallback hands a call to the fallback server; it keeps no place
// in Python's order.
func (h *handler) relayToFallback(ss grpc.ServerStream, path string) error {
	h.events.skip(ss.Context())
	return h.fallback.relay(ss, path)
}

// resolve asks Python what an unknown path is (EventLookup) and continues
// the call as the method Python routes it to (route), or ends it as Python
// says.
func (h *handler) resolve(ss grpc.ServerStream, path string) error {
	c, err := h.newCall(ss.Context(), path, -1)
	if err != nil {
		return err
	}
	c.awaitingRoute.Store(true)
	lookup := Event{Kind: EventLookup, CallID: c.id, MethodID: -1, Payload: mem.BufferSlice{mem.SliceBuffer(path)}, ClientKey: c.clientKey, call: c}
	if err := h.deliver(c, lookup, true); err != nil {
		return err
	}
	s := stream{h: h, c: c, out: ss}
	return s.serve()
}

// route continues a looked-up call c as Python routed it.
func (h *handler) route(ss grpc.ServerStream, c *call, methodID int32) error {
	if methodID == FallbackMethodID {
		// Python's part ends here: the fallback serves it.
		h.calls.end(c, outcomeCompleted)
		return h.relayToFallback(ss, c.path)
	}
	return h.serveMethod(ss, methodID, c)
}

// serveMethod reads the request, hands the call to Python, then relays
// Python's answer until the call ends. c is the call when it was created by
// a lookup, nil otherwise.
func (h *handler) serveMethod(ss grpc.ServerStream, methodID int32, c *call) error {
	ctx := ss.Context()
	var req mem.BufferSlice
	if err := ss.RecvMsg(&req); err != nil {
		err = requestMissing(ss, err)
		if c != nil {
			// Started when Python saw its lookup, so it ends with an
			// outcome, never as a refusal (metrics invariant).
			h.calls.end(c, abandonedOutcome(c.ctx, err))
			return err
		}
		return h.refuse(ctx, err)
	}
	m, _ := h.methods.get(methodID)
	first := c == nil
	if first {
		var err error
		if c, err = h.newCall(ctx, m.Path, methodID); err != nil {
			req.Free()
			return err
		}
	}
	c.methodID, c.unary = methodID, !m.ServerStreaming
	ev := Event{Kind: EventCall, CallID: c.id, MethodID: methodID, Payload: req, ClientKey: c.clientKey, call: c}
	if err := h.deliver(c, ev, first); err != nil {
		return err
	}
	s := stream{h: h, c: c, out: ss}
	return s.serve()
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
func (h *handler) refuse(ctx context.Context, err error) error {
	h.m.callsRefused.Add(1)
	h.events.skip(ctx)
	return err
}

// newCall starts a call, unless the concurrency limit refuses it.
func (h *handler) newCall(ctx context.Context, path string, methodID int32) (*call, error) {
	if limit := h.cfg.MaxConcurrentRPCs; limit > 0 && h.m.callsActive.Load() >= int64(limit) {
		return nil, h.refuse(ctx, status.Error(codes.ResourceExhausted, detailsConcurrencyLimit))
	}
	c := &call{
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
		c.conn, _ = p.Addr.(*connState)
	}
	c.clientKey = clientKeyFrom(ctx, c.conn)
	h.calls.start(c)
	return c, nil
}

// deliver queues an event of c: its first in the connection's order
// (Events.deliver), a later one (a looked-up call's EventCall) at once. On
// a stopped front the event is dropped and the call ends, cancelled by the
// server's stop.
func (h *handler) deliver(c *call, ev Event, first bool) error {
	var queued bool
	if first {
		queued = h.events.deliver(c.ctx, ev)
	} else {
		queued = h.events.push(ev)
	}
	if queued {
		return nil
	}
	ev.Release()
	h.calls.end(c, outcomeCancelled)
	return status.Error(codes.Unavailable, detailsServerStopping)
}

// abandonedOutcome is the outcome of a started call that ended without
// Python finishing it (its request never read, its client gone, its answer
// unwritable): cancelled, or deadline exceeded if that is why (cause is
// the error it ended with).
func abandonedOutcome(ctx context.Context, err error) outcome {
	if deadlinePassed(ctx, err) {
		return outcomeDeadline
	}
	return outcomeCancelled
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
func clientKeyFrom(ctx context.Context, conn *connState) string {
	if k, ok := ctx.Value(clientKeyCtx{}).(string); ok {
		return k
	}
	if conn != nil {
		return conn.peer
	}
	return ""
}
