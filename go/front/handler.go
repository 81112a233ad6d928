package front

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// Fixed status details, worded as grpcio words them so that clients see the
// same text from either server.
const (
	detailsMethodNotFound   = "Method not found!"
	detailsConcurrencyLimit = "Concurrent RPC limit exceeded!"
	detailsUnauthenticated  = "Missing or invalid bearer token"
	detailsServerStopping   = "Server is shutting down"
	detailsCancellingAll    = "Cancelling all calls"
	detailsMaxConnectionAge = "max connection age"
	detailsSocketClosed     = "Socket closed"
	detailsTooManyPings     = "Too many pings"
	detailsSecondMessage    = "A unary call answers with exactly one message"
)

// deadlineMargin is how much earlier than the client's deadline the front
// ends an unanswered call on a transport that resets a call the moment its
// deadline passes (grpc-go's: RST_STREAM CANCEL, which reaches a client
// whose own timer hasn't fired yet as CANCELLED); ending the call a little
// earlier, with status DEADLINE_EXCEEDED, gives the client what grpcio's
// server gives. A transport that itself ends such a call with
// DEADLINE_EXCEEDED (h2, as grpcio's server) gets no margin: a handler has
// all of the client's time there, and time_remaining() reads it, as on
// grpcio (with the margin, a handler answering 15 ms before a 300 ms
// deadline failed DEADLINE_EXCEEDED).
var deadlineMargin = 20 * time.Millisecond // a variable only for TestLateFrontEndIsStillADeadline

// deadlineStatus is how the front ends a call whose deadline passed, in
// grpcio's words.
var deadlineStatus = status.New(codes.DeadlineExceeded, "Deadline Exceeded")

// handler is the front's side of every call a transport carries: it admits
// each call (admit), routes it by path (serve), and serves it on the
// goroutine the transport runs it on, until it ends. Every call either
// reaches Python (it is started in Calls and ends there with one outcome)
// or is refused before (counted as refused, never started); calls answered
// natively (health) or relayed to the fallback are neither.
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

// admit is the admission hook a transport runs before a call starts, in
// the order the connection's calls arrived: the place to refuse oversized
// metadata and bad tokens cheaply (only that call ends) and to take an
// ordering ticket. The returned context is the call's. conn is the call's
// connection, which only an ordered front needs (nil is fine otherwise).
func (h *handler) admit(ctx context.Context, md Metadata, conn *connState) (context.Context, error) {
	if err := checkMetadataSize(md, h.cfg.Limits.MaxHeaderListSize); err != nil {
		h.m.callsRefused.Add(1)
		return ctx, err
	}
	key, authenticated := "", false
	if len(h.cfg.BearerTokens) > 0 {
		if key, authenticated = h.authenticate(md); !authenticated {
			h.m.callsRefused.Add(1)
			return ctx, status.Error(codes.Unauthenticated, detailsUnauthenticated)
		}
	}
	if h.cfg.Ordered && conn != nil {
		// Before the client key: the ticket's AfterFunc then watches the
		// transport's context itself, which needs no goroutine for it on
		// h2 (streamContext).
		ctx = h.events.takeTicket(ctx, &conn.order)
	}
	if authenticated {
		ctx = context.WithValue(ctx, clientKeyCtx{}, key)
	}
	return ctx, nil
}

// authenticate finds the client key of the call's bearer token.
func (h *handler) authenticate(md Metadata) (string, bool) {
	for _, kv := range md {
		if kv[0] != "authorization" {
			continue
		}
		if tok, ok := strings.CutPrefix(kv[1], "Bearer "); ok {
			if key, ok := h.cfg.BearerTokens[tok]; ok {
				return key, true
			}
		}
	}
	return "", false
}

// serve is the front's handler for every call: it routes the call by path
// through the method table and serves it until it ends. It returns the
// call's status when the call did not end with st.Finish.
func (h *handler) serve(st ServerStream) error {
	ctx := st.Context()
	if h.phase.get() != phaseServing {
		// Stopping: the transport's GOAWAY may not have reached this
		// connection yet, but new calls are refused from the moment Stop
		// began.
		if holdsSlot(st) {
			h.calls.slots.give()
		}
		return h.refuse(ctx, status.Error(codes.Unavailable, detailsServerStopping))
	}
	h.cfg.Limits.Compression.applyDefault(st)
	path := st.Method()
	if t := h.health.answers(path); t != nil {
		h.events.skip(ctx) // this call never reaches Python's queue
		return t.serve(st, path)
	}
	if id, m, ok := h.methods.lookup(path); ok {
		if m.Fallback {
			return h.relayToFallback(st, path)
		}
		return h.serveMethod(st, id, nil)
	}
	switch {
	case h.cfg.ResolveUnknown:
		return h.resolve(st, path)
	case h.fallback != nil:
		return h.relayToFallback(st, path)
	}
	return h.refuse(ctx, status.Error(codes.Unimplemented, detailsMethodNotFound))
}

// headersPlan is how a transport that hands a call over once its request
// is in (h2) treats a call at its HEADERS (handler.planAtHeaders).
type headersPlan struct {
	// atHeaders: hand the call over at once, not when its request is in.
	atHeaders bool
	// inline: serving the call won't wait (serve returns errDriven or ends
	// the call at once), so the transport may serve it on its reader.
	inline bool
	// slot: the call's place under maximum_concurrent_rpcs is taken. The
	// front owns it once the call is handed over (serveMethod, through
	// slotHolder); the transport gives it back (slots.give) if the call
	// ends before that.
	slot bool
}

// planAtHeaders says how a transport that hands a call over once its
// request is in (h2) treats the call to path at its HEADERS, after its
// admission. Request streams, relayed calls, and paths the front answers
// or looks up without reading a request first are wanted at once. Known
// unary-request methods and health wait for their request. Such a method
// takes its place under maximum_concurrent_rpcs now, as grpcio counts a
// call from its HEADERS, not from its request; when every place is taken
// it is wanted at once instead, to be refused without waiting for its
// request, as grpcio refuses it (on a worker: should a place free up
// meanwhile, it takes it there and waits for its request).
func (h *handler) planAtHeaders(path string) headersPlan {
	if h.health.answers(path) != nil {
		return headersPlan{}
	}
	_, m, ok := h.methods.lookup(path)
	switch {
	case !ok:
		return headersPlan{atHeaders: true}
	case m.ClientStreaming:
		return headersPlan{atHeaders: true, inline: true}
	case m.Fallback:
		return headersPlan{atHeaders: true}
	case h.calls.slots.limit == 0:
		return headersPlan{inline: true}
	case h.calls.slots.take():
		return headersPlan{inline: true, slot: true}
	}
	return headersPlan{atHeaders: true}
}

// slotHolder is a ServerStream whose transport may have taken the call's
// place under maximum_concurrent_rpcs before handing it over
// (headersPlan.slot).
type slotHolder interface {
	// HoldsSlot reports whether it did: the place is the front's now.
	HoldsSlot() bool
}

// holdsSlot reports whether st comes with its place taken (slotHolder).
func holdsSlot(st ServerStream) bool {
	sh, ok := st.(slotHolder)
	return ok && sh.HoldsSlot()
}

// relayToFallback hands a call to the fallback server; it keeps no place
// in Python's order.
func (h *handler) relayToFallback(st ServerStream, path string) error {
	h.events.skip(st.Context())
	return h.fallback.relay(st, path)
}

// resolve asks Python what an unknown path is (EventLookup) and continues
// the call as the method Python routes it to (route), or ends it as Python
// says.
func (h *handler) resolve(st ServerStream, path string) error {
	c := h.newCall(st, path, lookupMethodID, false)
	c.awaitingRoute.Store(true)
	lookup := Event{Kind: EventLookup, CallID: c.id, MethodID: -1, Payload: mem.BufferSlice{mem.SliceBuffer(path)}, ClientKey: c.clientKey, call: c}
	if err := h.deliver(c, lookup, true); err != nil {
		return err
	}
	s := stream{h: h, c: c, out: st}
	return s.serve()
}

// route continues a looked-up call c as Python routed it.
func (h *handler) route(st ServerStream, c *call, methodID int32) error {
	if methodID == FallbackMethodID {
		// Python's part ends here: the fallback serves it.
		h.calls.end(c, outcomeCompleted)
		return h.relayToFallback(st, c.path)
	}
	return h.serveMethod(st, methodID, c)
}

// serveMethod hands the call to Python (with its request, or with the
// request stream to follow under credit), then applies Python's answer
// until the call ends. c is the call when it was created by a lookup, nil
// otherwise.
func (h *handler) serveMethod(st ServerStream, methodID int32, c *call) error {
	m, _ := h.methods.get(methodID)
	first := c == nil
	// The call's place under maximum_concurrent_rpcs comes before its
	// request, as on grpcio: a call over the limit is refused at once,
	// without waiting for (or counting) a request it would never use. A
	// transport may have taken it at the call's HEADERS (slotHolder).
	if first {
		if !holdsSlot(st) && !h.calls.slots.take() {
			return h.refuse(st.Context(), status.Error(codes.ResourceExhausted, detailsConcurrencyLimit))
		}
	} else if err := h.takeRoutedSlot(c); err != nil {
		return err
	}
	var req mem.BufferSlice
	if !m.ClientStreaming {
		var err error
		if req, err = st.Request(); err != nil {
			err = requestMissing(st, err)
			if !first {
				// Started when Python saw its lookup, so it ends with an
				// outcome, never as a refusal (metrics invariant); ending
				// gives its place back.
				h.calls.end(c, abandonedOutcome(c.ctx, err))
				return err
			}
			h.calls.slots.give()
			return h.refuse(st.Context(), err)
		}
	}
	_, drive := st.(inlineStream)
	drive = drive && first // a looked-up call is served where it was routed
	if first {
		c = h.newCall(st, m.Path, methodID, drive)
	}
	c.methodID, c.unary = methodID, !m.ServerStreaming
	if m.ClientStreaming {
		c.requests = newRequestStream(c, h.events, st, h.cfg)
		st.StartRequests(c.requests)
	}
	s := c.newStream(h)
	if drive {
		s.driven()
	}
	ev := Event{Kind: EventCall, CallID: c.id, MethodID: methodID, Payload: req, ClientKey: c.clientKey, call: c}
	if err := h.deliver(c, ev, first); err != nil {
		if drive {
			s.c.ops.close() // deliver has ended the call (Calls.end)
		}
		return err
	}
	if drive {
		return errDriven
	}
	return s.serve()
}

// takeRoutedSlot gives a looked-up call, now routed to a method, its
// place under maximum_concurrent_rpcs, or ends it with RESOURCE_EXHAUSTED
// (an outcome, not a refusal: Python saw its lookup) when none is free.
func (h *handler) takeRoutedSlot(c *call) error {
	if !h.calls.slots.take() {
		h.calls.end(c, outcomeCompleted)
		return status.Error(codes.ResourceExhausted, detailsConcurrencyLimit)
	}
	h.calls.table.claimSlot(c)
	return nil
}

// requestMissing is the status of a call whose request could not be read
// (err from RecvMsg).
func requestMissing(st ServerStream, err error) error {
	if errors.Is(err, io.EOF) {
		// The client half-closed without a request; grpcio's answer, which
		// names the path as Python writes bytes.
		return status.Error(codes.Unimplemented, `"`+pythonBytesRepr(st.Method())+`" requires exactly one request message.`)
	}
	// Otherwise the transport's status (e.g. RESOURCE_EXHAUSTED for a
	// request over the size limit).
	return err
}

// pythonBytesRepr is repr(s.encode()) in Python: b'...' (b"..." where s
// has a ' and no "), with \\, the quote, \t, \n, \r and \xhh for other
// bytes outside printable ASCII.
func pythonBytesRepr(s string) string {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	const hex = "0123456789abcdef"
	b := make([]byte, 0, len(s)+3)
	b = append(b, 'b', quote)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == quote || c == '\\':
			b = append(b, '\\', c)
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c < 0x20 || c >= 0x7f:
			b = append(b, '\\', 'x', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return string(append(b, quote))
}

// refuse ends a call that never reaches Python.
func (h *handler) refuse(ctx context.Context, err error) error {
	h.m.callsRefused.Add(1)
	h.events.skip(ctx)
	return err
}

// baseContexter is a ServerStream whose context is a streamContext, or
// admit's context.WithValue of one: its calls get a streamContext of their
// own for their deadline (call.own).
type baseContexter interface {
	baseContext() *streamContext
}

// lookupMethodID is the method of a call whose path Python looks up
// (EventLookup) until Python routes it.
const lookupMethodID = -1

// newCall starts a call. A method's call has taken its place under the
// concurrency limit (serveMethod: taking it is one atomic step,
// slots.take, so a burst can't run more calls than the limit); a lookup's
// call starts slotless (call.slotless) and takes its place when routed
// (takeRoutedSlot). driven: the call will be driven by its ops
// (stream.driven), so no goroutine waits for them and its queue needs no
// ready channel.
func (h *handler) newCall(st ServerStream, path string, methodID int32, driven bool) *call {
	ctx := st.Context()
	lookup := methodID == lookupMethodID
	c := newCallMemory(st)
	*c = call{
		methodID: methodID,
		path:     path,
		ctx:      ctx,
		st:       st,
		slotless: lookup,
	}
	if !driven {
		c.ops.ready = make(chan struct{}, 1)
	}
	if dl, ok := ctx.Deadline(); ok {
		if b, own := st.(baseContexter); own && driven {
			// No allocation, and no goroutine at its end (streamContext).
			c.own.deadline = callDeadline(st, dl)
			c.own.values = ctx
			c.ctx = &c.own
			b.baseContext().link(&c.own)
		} else {
			c.ctx, c.stop = context.WithDeadline(ctx, callDeadline(st, dl))
		}
	}
	c.conn = st.Conn()
	c.clientKey = clientKeyFrom(ctx, c.conn)
	h.calls.start(c)
	return c
}

// deliver queues an event of c: its first in the connection's order
// (Events.deliver), a later one (a looked-up call's EventCall) at once. On
// a stopped front the event is dropped and the call ends, cancelled by the
// server's stop.
func (h *handler) deliver(c *call, ev Event, first bool) error {
	c.handedOver.Store(true)
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

// beforeDeadline is st's context ending at the call's own deadline
// (callDeadline), if it has one.
func beforeDeadline(st ServerStream) (context.Context, context.CancelFunc) {
	ctx := st.Context()
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, callDeadline(st, dl))
}

// resetsAtDeadline marks a ServerStream whose transport resets a call the
// moment its deadline passes instead of ending it with status
// DEADLINE_EXCEEDED (grpc-go's); see deadlineMargin.
type resetsAtDeadline interface{ resetsAtDeadline() }

// callDeadline is the call's own deadline for a client's deadline dl: dl,
// or on a transport that resets at the deadline, deadlineMargin (or a
// tenth of the time left, if less) before it.
func callDeadline(st ServerStream, dl time.Time) time.Time {
	if _, resets := st.(resetsAtDeadline); !resets {
		return dl
	}
	return dl.Add(-min(deadlineMargin, time.Until(dl)/10))
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
