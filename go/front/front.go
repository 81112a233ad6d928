package front

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // gzip for requests and responses, as grpcio
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// lifecycle states of a Front.
const (
	stateNew int32 = iota
	stateServing
	stateStopping
	stateStopped
)

// LifecycleError is Start or Bind used out of order. The C shim raises it as
// RuntimeError.
type LifecycleError struct{ msg string }

func (e *LifecycleError) Error() string { return e.msg }

// Front is one native gRPC server and its event queue.
type Front struct {
	cfg *Config
	// opts build srv at Start.
	opts []grpc.ServerOption
	// tls is the TLS configuration of listeners bound from now on (SetTLS);
	// nil: plaintext.
	tls   *tls.Config
	srv   *grpc.Server
	queue *eventQueue
	// watchedQueue gets the EventCancel of watched calls (Watch), so that
	// Python can take them on a thread of their own.
	watchedQueue *eventQueue
	methods      *methodTable
	health       atomic.Pointer[healthTable] // nil until EnableHealth
	fallback     *grpc.ClientConn            // nil without a fallback server
	calls        callTable
	lastID       atomic.Uint64
	m            metrics

	mu    sync.Mutex // serializes Bind, Start and Stop
	state atomic.Int32
	port  atomic.Int32 // the first bound port, readable while Stop holds mu
	// listeners are the bound addresses, each with its own TLS
	// configuration (listenerCreds); all serve the same methods.
	listeners []*listener
	serveDone sync.WaitGroup // one per listener's Serve
	stopped   chan struct{}  // closed once the front has stopped
	// While stopping: when calls in flight are cancelled (guarded by mu),
	// and a wake-up for the stop's timer when a later stop moves it earlier.
	stopDeadline time.Time
	stopSooner   chan struct{}
}

// New builds a front from cfg. Nothing is bound until Start.
func New(cfg *Config) (*Front, error) {
	f := &Front{
		cfg:          cfg,
		tls:          cfg.TLS,
		queue:        newEventQueue(),
		watchedQueue: newEventQueue(),
		methods:      newMethodTable(cfg.Methods),
		stopped:      make(chan struct{}),
	}
	l := cfg.Limits
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(rawCodec{}),
		grpc.UnknownServiceHandler(f.dispatch),
		grpc.MaxRecvMsgSize(l.MaxRecvMsgSize),
		// The send limit is enforced by send() with grpcio's wording.
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.MaxConcurrentStreams(l.MaxConcurrentStreams),
		// The metadata limit is enforced per call by tap. grpc-go's own
		// limit is a connection error (its HPACK decoder refuses longer
		// strings), so it stays at grpc-go's default, far above ours.
		grpc.MaxHeaderListSize(transportHeaderListLimit),
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:                  l.KeepaliveTime,
			Timeout:               l.KeepaliveTimeout,
			MaxConnectionIdle:     l.MaxConnectionIdle,
			MaxConnectionAge:      l.MaxConnectionAge,
			MaxConnectionAgeGrace: l.MaxConnectionAgeGrace,
		}),
		// Client pings are accepted, not policed (README: server options).
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Nanosecond, PermitWithoutStream: true}),
		// Stop returns only after every handler has queued its last event,
		// so the queue can be closed behind them.
		grpc.WaitForHandlers(true),
		grpc.NumStreamWorkers(streamWorkers),
		experimental.BufferPool(messagePool),
	}
	f.opts = append(opts, grpc.InTapHandle(f.tap))
	if cfg.Fallback != "" {
		conn, err := dialFallback(cfg.Fallback)
		if err != nil {
			return nil, configErrorf("fallback %q: %v", cfg.Fallback, err)
		}
		f.fallback = conn
	}
	return f, nil
}

// streamWorkers is how many goroutines grpc-go keeps to run calls, instead
// of a new goroutine per call (grpc-go starts one anyway when all are busy).
// A call's goroutine waits for Python's answer, so this is sized for
// calls in flight, not for cores. Reuse matters because grpc-go's stream
// path outgrows a fresh goroutine's stack: growing and copying it cost a
// fifth of the front's CPU per call. The library is built with GC stack
// shrinking off (gcshrinkstackoff=1, set at link time: setup.py, Bazel),
// or every GC would shrink the idle workers' stacks for them to grow again.
const streamWorkers = 256

// transportHeaderListLimit is grpc-go's default header list limit.
const transportHeaderListLimit = 16 << 20

// tap runs in the connection's reader goroutine, in arrival order, before
// any handler: the place to refuse oversized metadata and bad tokens
// cheaply (only that call ends) and to take an ordering ticket.
func (f *Front) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if err := checkMetadataSize(info.Header, f.cfg.Limits.MaxHeaderListSize); err != nil {
		f.m.callsRefused.Add(1)
		return ctx, err
	}
	if len(f.cfg.BearerTokens) > 0 {
		key, ok := f.authenticate(info.Header)
		if !ok {
			f.m.callsRefused.Add(1)
			return ctx, status.Error(codes.Unauthenticated, detailsUnauthenticated)
		}
		ctx = context.WithValue(ctx, clientKeyCtx{}, key)
	}
	if f.cfg.Ordered {
		if p, ok := peer.FromContext(ctx); ok {
			if ca, ok := p.Addr.(*connAddr); ok {
				ctx = takeTicket(ctx, &ca.order, f.queue)
			}
		}
	}
	return ctx, nil
}

// authenticate finds the client key of the call's bearer token.
func (f *Front) authenticate(md metadata.MD) (string, bool) {
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok {
			if key, ok := f.cfg.BearerTokens[tok]; ok {
				return key, true
			}
		}
	}
	return "", false
}

// Bind listens on address (the configured one when empty) without serving
// yet, with the TLS configuration SetTLS gave last, and returns the bound
// port (1 for a Unix socket, as grpcio). Connections wait in the backlog
// until Start. A front binds any number of addresses; every one serves the
// same methods.
func (f *Front) Bind(address string) (int, error) {
	if err := f.checkNew(); err != nil {
		return 0, err // without waiting for a Stop in progress
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkNew(); err != nil {
		return 0, err
	}
	return f.bindLocked(address)
}

func (f *Front) bindLocked(address string) (int, error) {
	if address == "" {
		address = f.cfg.Address
	}
	lis, err := listen(address, &f.cfg.Limits, f.tls, &f.m)
	if err != nil {
		return 0, err
	}
	if len(f.listeners) == 0 {
		f.port.Store(int32(lis.port()))
	}
	f.listeners = append(f.listeners, lis)
	if isLocalhost(address) {
		// grpcio binds both loopbacks for "localhost", on one port; the
		// IPv6 one is skipped where it can't be bound, as grpcio does.
		if lis6, err := listen(fmt.Sprintf("[::1]:%d", lis.port()), &f.cfg.Limits, f.tls, &f.m); err == nil {
			f.listeners = append(f.listeners, lis6)
		}
	}
	return lis.port(), nil
}

func (f *Front) checkNew() error {
	switch f.state.Load() {
	case stateServing:
		return &LifecycleError{"the front is already started"}
	case stateStopping, stateStopped:
		return &LifecycleError{"the front is stopped and cannot be started again; create a new one"}
	}
	return nil
}

// Start binds the configured address unless Bind already did, and serves.
func (f *Front) Start() error {
	if err := f.checkNew(); err != nil {
		return err // without waiting for a Stop in progress
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkNew(); err != nil {
		return err
	}
	if len(f.listeners) == 0 {
		if _, err := f.bindLocked(""); err != nil {
			return err
		}
	}
	opts := f.opts
	if f.anyTLS() {
		opts = append(opts[:len(opts):len(opts)], grpc.Creds(newListenerCreds()))
	}
	f.srv = grpc.NewServer(opts...)
	f.state.Store(stateServing)
	for _, lis := range f.listeners {
		f.serveDone.Add(1)
		go func() {
			defer f.serveDone.Done()
			_ = f.srv.Serve(lis)
		}()
	}
	return nil
}

// anyTLS reports whether a listener serves TLS: only then do connections
// go through listenerCreds.
func (f *Front) anyTLS() bool {
	for _, lis := range f.listeners {
		if lis.tls != nil {
			return true
		}
	}
	return false
}

// closeListeners stops accepting connections on every port.
func (f *Front) closeListeners() {
	for _, lis := range f.listeners {
		lis.Close()
	}
}

// Port is the first bound port (1 for a Unix socket), or 0 before Start.
func (f *Front) Port() int { return int(f.port.Load()) }

// BeginStop refuses new calls before it returns (the listener is closed,
// and connections get GOAWAY), gives calls in flight up to grace to finish
// (grace < 0: none), then cancels the rest, in the background. When every
// handler has ended the queues are closed, so Recv drains them and reports
// closed, and Stopped is closed. Stopping a stopped front does nothing. A
// BeginStop while a stop is under way can only shorten it, as grpcio's
// stop(): calls are cancelled at the earliest of the stops' deadlines.
func (f *Front) BeginStop(grace time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch f.state.Load() {
	case stateStopped:
		return
	case stateStopping:
		f.shortenStop(grace)
		return
	case stateNew:
		f.closeListeners()
		f.finishStop()
		return
	}
	f.state.Store(stateStopping)
	f.closeListeners()
	f.stopDeadline = stopDeadline(grace)
	f.stopSooner = make(chan struct{}, 1)
	drained := make(chan struct{})
	go func() {
		f.srv.GracefulStop()
		close(drained)
	}()
	go func() {
		f.waitGrace(drained)
		<-drained
		f.serveDone.Wait()
		f.finishStop()
	}()
}

// stopDeadline is when calls still in flight are cancelled.
func stopDeadline(grace time.Duration) time.Time {
	if grace < 0 {
		return time.Now()
	}
	return time.Now().Add(grace)
}

// shortenStop moves the running stop's deadline earlier if grace ends
// before it; called with mu held.
func (f *Front) shortenStop(grace time.Duration) {
	if d := stopDeadline(grace); d.Before(f.stopDeadline) {
		f.stopDeadline = d
		select {
		case f.stopSooner <- struct{}{}:
		default: // a wake-up is already pending; it reads the new deadline
		}
	}
}

// waitGrace returns when drained is closed, or after cancelling every call
// once the stop's deadline (which shortenStop may move) has passed.
func (f *Front) waitGrace(drained <-chan struct{}) {
	for {
		f.mu.Lock()
		left := time.Until(f.stopDeadline)
		f.mu.Unlock()
		if left <= 0 {
			f.srv.Stop()
			return
		}
		t := time.NewTimer(left)
		select {
		case <-drained:
			t.Stop()
			return
		case <-t.C:
		case <-f.stopSooner:
			t.Stop()
		}
	}
}

func (f *Front) finishStop() {
	f.closeFallback()
	f.state.Store(stateStopped)
	f.queue.close()
	f.watchedQueue.close()
	close(f.stopped)
}

// Stop is BeginStop, then waits until the front has stopped.
func (f *Front) Stop(grace time.Duration) {
	f.BeginStop(grace)
	<-f.stopped
}

// Recv waits up to timeout (negative: forever) for events and returns up
// to max of them, with at most maxBytes of payload unless the first event
// alone has more; closed reports that the front stopped and the queue is
// drained. The caller releases each event (Event.Release) once it has
// copied the payload.
func (f *Front) Recv(max, maxBytes int, timeout time.Duration) (batch []Event, closed bool) {
	batch, closed = f.queue.recv(max, maxBytes, timeout)
	if len(batch) > 0 {
		f.m.batchesDelivered.Add(1)
		f.m.eventsDelivered.Add(uint64(len(batch)))
	}
	return batch, closed
}

// Close stops the front at once and releases what it holds beyond the
// server (the EventFD pipe). The front is unusable afterwards.
func (f *Front) Close() {
	f.Stop(-1)
	f.queue.closeNotifier()
}

// EventFD returns a file descriptor that is readable exactly while events
// wait for Recv (or the front has stopped), for event loops: watch it, and
// when it is readable, take events with a zero timeout. It stays open as
// long as the front.
func (f *Front) EventFD() (int, error) {
	n, err := f.queue.notifier()
	if err != nil {
		return -1, err
	}
	return n.r, nil
}

// RecvWatched is Recv for the EventCancel events of watched calls.
func (f *Front) RecvWatched(max int, timeout time.Duration) (batch []Event, closed bool) {
	return f.watchedQueue.recv(max, math.MaxInt, timeout)
}

// Watch sends the call's EventCancel, if it ends without Python finishing
// it, to the watched queue (RecvWatched) instead of the main one. It
// reports ResultEnded for a call that has already ended.
func (f *Front) Watch(id uint64) Result {
	if f.calls.watch(id) {
		return ResultOK
	}
	_, r := f.lookup(id)
	if r == ResultOK {
		// It ended between the two looks.
		return ResultEnded
	}
	return r
}

// Metrics returns the counters under MetricNames.
func (f *Front) Metrics() []Metric { return f.m.snapshot(f.queue.len()) }

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
	// ResultWouldBlock: the call's op buffer is full; retry with block.
	ResultWouldBlock
	// ResultStopped: the front has stopped; every call has ended.
	ResultStopped
)

// lookup finds a live call or says why there is none.
func (f *Front) lookup(id uint64) (*call, Result) {
	if c := f.calls.get(id); c != nil {
		return c, ResultOK
	}
	if id == 0 || id > f.lastID.Load() {
		return nil, ResultUnknown
	}
	if f.state.Load() == stateStopped {
		return nil, ResultStopped
	}
	return nil, ResultEnded
}

// post hands an op to a call. Without block it never waits; with block it
// waits for room until the call ends.
func (f *Front) post(id uint64, o op, block bool) Result {
	c, r := f.lookup(id)
	if r != ResultOK {
		return r
	}
	return c.ops.put(o, block, c.ended)
}

// Respond answers a unary call with one message and status OK. The
// payload belongs to the call from here on (grpc-go frees pooled buffers
// once they are written).
func (f *Front) Respond(id uint64, payload mem.BufferSlice, block bool) Result {
	return f.post(id, op{kind: opFinish, payload: payload, hasPayload: true}, block)
}

// Send sends one message on a call; the payload is the call's, as in
// Respond.
func (f *Front) Send(id uint64, payload mem.BufferSlice, block bool) Result {
	return f.post(id, op{kind: opMessage, payload: payload}, block)
}

// detailsInvalidMetadata is what grpcio's client gets for response
// metadata gRPC can't carry.
const detailsInvalidMetadata = "Invalid metadata"

// SendHeader sends initial metadata. Invalid metadata ends the call with
// INTERNAL "Invalid metadata", as with grpcio, and is reported as err.
func (f *Front) SendHeader(id uint64, md metadata.MD, block bool) (Result, error) {
	if err := validateMetadata(md); err != nil {
		return f.post(id, op{kind: opFinish, code: codes.Internal, details: detailsInvalidMetadata}, block), err
	}
	return f.post(id, op{kind: opHeader, md: md}, block), nil
}

// Finish ends a call: an optional last message (sent only with code OK),
// trailing metadata, and the status. Invalid metadata ends the call as in
// SendHeader.
func (f *Front) Finish(id uint64, code codes.Code, details string, md metadata.MD, payload mem.BufferSlice, hasPayload, block bool) (Result, error) {
	if err := validateMetadata(md); err != nil {
		return f.post(id, op{kind: opFinish, code: codes.Internal, details: detailsInvalidMetadata}, block), err
	}
	return f.post(id, op{kind: opFinish, code: code, details: details, md: md, payload: payload, hasPayload: hasPayload}, block), nil
}

func (f *Front) closeFallback() {
	if f.fallback != nil {
		f.fallback.Close()
	}
}

// Route continues a call that arrived as EventLookup as method methodID,
// or relays it to the fallback server (FallbackMethodID).
func (f *Front) Route(id uint64, methodID int32) (Result, error) {
	if methodID == FallbackMethodID {
		if f.fallback == nil {
			return ResultOK, configErrorf("this front has no fallback server")
		}
	} else if m, ok := f.methods.get(methodID); !ok || m.Fallback {
		return ResultOK, configErrorf("unknown method id %d", methodID)
	}
	c, r := f.lookup(id)
	if r != ResultOK {
		return r, nil
	}
	if !c.lookup.Load() {
		return ResultOK, configErrorf("call %d is not waiting for a lookup (EVENT_LOOKUP)", id)
	}
	return f.post(id, op{kind: opRoute, method: methodID}, true), nil
}

// AddMethod serves a method natively from now on and returns its id.
func (f *Front) AddMethod(path string, serverStreaming bool) (int32, error) {
	return f.methods.add(Method{Path: path, ServerStreaming: serverStreaming})
}

// AddFallbackMethod relays every call of a method to the fallback server
// from now on, without asking Python.
func (f *Front) AddFallbackMethod(path string) error {
	if f.fallback == nil {
		return configErrorf("this front has no fallback server")
	}
	_, err := f.methods.add(Method{Path: path, Fallback: true})
	return err
}

// Cancel ends a call with CANCELLED, as grpcio's context.cancel() does.
func (f *Front) Cancel(id uint64) Result {
	return f.post(id, op{kind: opCancel}, true)
}

// IsActive reports whether a call is still live.
func (f *Front) IsActive(id uint64) (bool, Result) {
	_, r := f.lookup(id)
	switch r {
	case ResultOK:
		return true, ResultOK
	case ResultEnded:
		return false, ResultOK
	}
	return false, r
}

// TimeRemaining is the time left before the call's deadline; has is false
// when the client set none.
func (f *Front) TimeRemaining(id uint64) (left time.Duration, has bool, r Result) {
	c, r := f.lookup(id)
	if r != ResultOK {
		return 0, false, r
	}
	d, ok := c.ctx.Deadline()
	if !ok {
		return 0, false, ResultOK
	}
	return max(time.Until(d), 0), true, ResultOK
}

// CallDetails is what Python can ask about a call, computed on request so
// that none of it costs anything on the per-call path.
type CallDetails struct {
	Method        string
	Metadata      [][2]string // (key, value); values of -bin keys are raw bytes
	Peer          string
	Authority     string
	ClientKey     string
	HasDeadline   bool
	TimeRemaining time.Duration
	// Auth is the connection's identity in grpcio's auth_context() terms.
	Auth *Auth
}

// Details describes a live call.
func (f *Front) Details(id uint64) (CallDetails, Result) {
	c, r := f.lookup(id)
	if r != ResultOK {
		return CallDetails{}, r
	}
	d := CallDetails{Method: c.path, ClientKey: c.clientKey}
	if c.conn != nil {
		d.Peer = c.conn.peer
	}
	p, _ := peer.FromContext(c.ctx)
	d.Auth = connAuth(p, c.conn)
	md, _ := metadata.FromIncomingContext(c.ctx)
	if a := md.Get(":authority"); len(a) > 0 {
		d.Authority = a[0]
	}
	d.Metadata = invocationMetadata(md)
	if dl, ok := c.ctx.Deadline(); ok {
		d.HasDeadline, d.TimeRemaining = true, max(time.Until(dl), 0)
	}
	return d, ResultOK
}

// invocationMetadata is the request metadata a handler sees: what grpcio's
// invocation_metadata() returns, without pseudo-headers and the keys gRPC
// reserves for itself. grpc-go keeps metadata in a map, so keys come back
// sorted; repeated keys keep their order.
func invocationMetadata(md metadata.MD) [][2]string {
	keys := make([]string, 0, len(md))
	for k := range md {
		if strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") || k == "content-type" || k == "te" {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out [][2]string
	for _, k := range keys {
		for _, v := range md[k] {
			out = append(out, [2]string{k, v})
		}
	}
	return out
}
