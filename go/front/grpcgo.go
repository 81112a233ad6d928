package front

import (
	"context"
	"errors"
	"io"
	"math"
	"sort"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	_ "google.golang.org/grpc/encoding/gzip" // gzip for requests and responses, as grpcio
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// grpc-go's server as the front's transport: the one implementation of the
// seam (transport.go). Everything that knows grpc-go's server stream lives
// in this file; the calls it carries reach the front through handler.serve
// as ServerStreams.

// newGRPCGoServer is a grpc-go server whose calls h serves; tls: some
// listener serves TLS (listenerCreds picks each listener's); cs, if not
// nil, is told of every call's life (CallStats).
func newGRPCGoServer(l *Limits, h *handler, tls bool, cs CallStats, open *openConns) transportServer {
	g := grpcgoHandler{h: h, cs: cs}
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(rawCodec{}),
		grpc.UnknownServiceHandler(g.dispatch),
		grpc.InTapHandle(g.tap),
		grpc.MaxRecvMsgSize(l.MaxRecvMsgSize),
		// The send limit is enforced by the front with grpcio's wording
		// (sendMessage).
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.MaxConcurrentStreams(l.MaxConcurrentStreams),
		// The metadata limit is enforced per call by the admission hook.
		// grpc-go's own limit is a connection error (its HPACK decoder
		// refuses longer strings), so it stays at grpc-go's default, far
		// above ours.
		grpc.MaxHeaderListSize(transportHeaderListLimit),
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:                  l.KeepaliveTime,
			Timeout:               l.KeepaliveTimeout,
			MaxConnectionIdle:     l.MaxConnectionIdle,
			MaxConnectionAge:      l.MaxConnectionAge,
			MaxConnectionAgeGrace: l.MaxConnectionAgeGrace,
		}),
		grpc.KeepaliveEnforcementPolicy(grpcgoPingPolicy(l)),
		// Stop returns only after every handler has queued its last event,
		// so the queues can be closed behind them.
		grpc.WaitForHandlers(true),
		grpc.NumStreamWorkers(streamWorkers),
		experimental.BufferPool(messagePool),
	}
	if l.FixedWindow {
		// grpc.http2.bdp_probe 0: grpc-go's fixed windows (which it
		// takes from 64 KiB up); the connection's as the h2 transport's.
		opts = append(opts,
			grpc.InitialWindowSize(int32(max(l.StreamWindow, grpcioLookahead))),
			grpc.InitialConnWindowSize(h2ConnWindow))
	}
	if tls {
		opts = append(opts, grpc.Creds(newListenerCreds()))
	}
	if cs != nil {
		opts = append(opts, grpc.StatsHandler(grpcgoStats{cs}))
	}
	return grpcgoServer{grpc.NewServer(opts...), open}
}

// grpcgoServer is grpc-go's server as the front stops it: its Stop closes
// first the connections the listeners accepted (open), which ends those
// still in their handshake. grpc-go's own Stop, and GracefulStop, wait for
// each of those until its handshake timeout (120 s: a client that connects
// and sends nothing held stop(grace) that long, whatever the grace); the
// others it closes anyway.
type grpcgoServer struct {
	*grpc.Server
	open *openConns
}

// grpcgoPingPolicy is the client ping policy (pingPolicy) as grpc-go can
// hold it: its interval and keepalive-without-calls rule, with grpc-go's
// fixed limit of two strikes; max_ping_strikes 0 (no limit) lets every ping
// through.
func grpcgoPingPolicy(l *Limits) keepalive.EnforcementPolicy {
	if l.PingStrikes == 0 {
		return keepalive.EnforcementPolicy{MinTime: time.Nanosecond, PermitWithoutStream: true}
	}
	// grpc-go takes a MinTime of 0 as its default, 5 minutes.
	return keepalive.EnforcementPolicy{MinTime: max(l.PingMinInterval, time.Nanosecond), PermitWithoutStream: l.KeepalivePermitNoCalls}
}

func (g grpcgoServer) Stop() {
	g.open.closeAll()
	g.Server.Stop()
}

// grpcgoStats feeds grpc-go's per-call stats to a CallStats.
type grpcgoStats struct{ cs CallStats }

type grpcgoStatsKey struct{}

func (g grpcgoStats) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, grpcgoStatsKey{}, &grpcgoCallStats{method: info.FullMethodName})
}

// grpcgoCallStats is one call's value from CallStats.Begin, set at its
// Begin (grpc-go reports a call's stats from one goroutine at a time).
type grpcgoCallStats struct {
	method   string
	call     any
	begun    bool
	trailers bool // the status went out in trailers (stats.OutTrailer)
}

func (g grpcgoStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	c, ok := ctx.Value(grpcgoStatsKey{}).(*grpcgoCallStats)
	if !ok {
		return
	}
	switch s := s.(type) {
	case *stats.Begin:
		c.call, c.begun = g.cs.Begin(c.method, s.BeginTime), true
	case *stats.InPayload:
		if c.begun {
			g.cs.Messages(c.call, false, 1, s.WireLength)
		}
	case *stats.OutPayload:
		if c.begun {
			g.cs.Messages(c.call, true, 1, s.WireLength)
		}
	case *stats.OutTrailer:
		c.trailers = true
	case *stats.End:
		if c.begun {
			// A call whose status never went out in trailers was reset (by
			// the client, or by the transport at its deadline). The call's
			// context tells nothing here: grpc-go cancels it once the
			// trailers are written, before End.
			g.cs.End(c.call, s.EndTime, status.Code(s.Error), !c.trailers)
		}
	}
}

func (grpcgoStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (grpcgoStats) HandleConn(context.Context, stats.ConnStats) {}

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

// grpcgoHandler adapts grpc-go's server callbacks to the front's handler.
type grpcgoHandler struct {
	h  *handler
	cs CallStats // nil: no stats
}

// tap runs in the connection's reader goroutine, in arrival order, before
// any handler: the front's admission hook.
func (g grpcgoHandler) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	var conn *connState
	if g.h.cfg.Ordered { // only ordering needs the connection here
		if p, ok := peer.FromContext(ctx); ok {
			conn, _ = p.Addr.(*connState)
		}
	}
	ctx, err := g.h.admit(ctx, metadataOf(info.Header), conn)
	if err != nil && g.cs != nil {
		// grpc-go's stats handler never hears of a call its tap refused
		// (it answers before the call begins): report it here, as a call
		// of no duration, so that CallStats sees every call.
		now := time.Now()
		g.cs.End(g.cs.Begin(info.FullMethodName, now), now, status.Code(err), false)
	}
	return ctx, err
}

// dispatch is grpc-go's handler for every call (grpc.UnknownServiceHandler):
// every method takes grpc-go's streaming path, so one handler serves every
// kind of method.
func (g grpcgoHandler) dispatch(_ any, ss grpc.ServerStream) error {
	if d := g.h.cfg.Limits.DisabledCompression; d != nil {
		// grpc-go keeps the request's encoding out of the metadata the
		// admission hook sees, so it is checked here.
		if rc, ok := grpc.ServerTransportStreamFromContext(ss.Context()).(recvCompressor); ok {
			if err := d.check(rc.RecvCompress()); err != nil {
				g.h.m.callsRefused.Add(1)
				return err
			}
		}
	}
	st := &grpcgoStream{ss: ss, ctx: ss.Context()}
	if err := g.h.serve(st); err != nil {
		return err
	}
	return st.status
}

// grpcgoStream is a call on grpc-go's server as a ServerStream.
type grpcgoStream struct {
	ss  grpc.ServerStream
	ctx context.Context
	// status is what Finish set: returned to grpc-go when the handler
	// returns (nil: OK). Written by the call's sender only.
	status error

	// Request streams (StartRequests): credits granted and not used, and a
	// token while the reader may have credit to use.
	credits     atomic.Int64
	creditReady chan struct{}
}

func (s *grpcgoStream) Context() context.Context { return s.ctx }

// resetsAtDeadline: grpc-go's transport resets a call (RST_STREAM CANCEL)
// at its deadline; the front ends it first (deadlineMargin).
func (s *grpcgoStream) resetsAtDeadline() {}

func (s *grpcgoStream) Method() string {
	m, _ := grpc.MethodFromServerStream(s.ss)
	return m
}

// Header is the request metadata. grpc-go keeps it in a map, so keys come
// back sorted; the values of a repeated key keep their order.
func (s *grpcgoStream) Header() [][2]string {
	md, _ := metadata.FromIncomingContext(s.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
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

func (s *grpcgoStream) Conn() *connState {
	if p, ok := peer.FromContext(s.ctx); ok {
		cs, _ := p.Addr.(*connState)
		return cs
	}
	return nil
}

func (s *grpcgoStream) Security() *ConnSecurity {
	p, ok := peer.FromContext(s.ctx)
	if !ok {
		return plaintextSecurity
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		if _, local := p.AuthInfo.(localAuthInfo); local {
			return localSecurity
		}
		return plaintextSecurity
	}
	cs, _ := p.Addr.(*connState)
	return connSecurity(&ti.State, cs)
}

func (s *grpcgoStream) ClientCompressors() []string {
	accepted, _ := grpc.ClientSupportedCompressors(s.ctx)
	return accepted
}

func (s *grpcgoStream) Request() (mem.BufferSlice, error) {
	var req mem.BufferSlice
	if err := s.ss.RecvMsg(&req); err != nil {
		return nil, err
	}
	return req, nil
}

func (s *grpcgoStream) StartRequests(sink RequestSink) {
	s.creditReady = make(chan struct{}, 1)
	go s.readRequests(sink)
}

func (s *grpcgoStream) Credit(n int) {
	if n > 0 && s.creditReady != nil {
		s.credits.Add(int64(n))
		signal(s.creditReady)
	}
}

// readRequests is the goroutine grpc-go's transport needs to push a request
// stream: it reads one message per credit (grpc-go reads the socket into
// the stream's window meanwhile; its window updates follow these reads, so
// a client that outruns the credit is held back by HTTP/2 flow control).
func (s *grpcgoStream) readRequests(sink RequestSink) {
	for {
		for s.credits.Load() <= 0 {
			select {
			case <-s.creditReady:
			case <-s.ctx.Done():
				sink.End(s.ctx.Err())
				return
			}
		}
		s.credits.Add(-1)
		var m mem.BufferSlice
		err := s.ss.RecvMsg(&m)
		switch {
		case err == nil:
			sink.Message(m)
			continue
		case errors.Is(err, io.EOF):
			sink.End(nil)
		case s.ctx.Err() != nil:
			sink.End(s.ctx.Err()) // the call ended on the wire
		default:
			sink.End(err) // grpc-go refused a message: its status
		}
		return
	}
}

func (s *grpcgoStream) SendHeader(md Metadata) error { return s.ss.SendHeader(md.md()) }

func (s *grpcgoStream) SendMessage(b mem.BufferSlice, uncompressed bool) error {
	var err error
	if uncompressed {
		err = s.sendUncompressed(b)
	} else {
		err = s.ss.SendMsg(b)
	}
	return streamGone(err)
}

// errStreamGone is a send that failed because the call is gone from the
// wire (ServerStream.SendMessage).
var errStreamGone = errors.New("front: the call's stream is gone")

// streamGone turns the status grpc-go's transport reports for a stream that
// is gone (CANCELLED or DEADLINE_EXCEEDED for a reset or expired stream,
// UNAVAILABLE for a closing connection) into errStreamGone; the statuses
// grpc-go decides on a message (RESOURCE_EXHAUSTED, INTERNAL) stay verdicts.
// The context can't tell: grpc-go marks a stream done before it cancels the
// stream's context, so a send may fail so while the context is still live.
func streamGone(err error) error {
	switch status.Code(err) {
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable:
		return errStreamGone
	}
	return err
}

// sendUncompressed sends one message with the compressed flag off, whatever
// the call's compression. grpc-go's ServerStream has no per-message switch;
// a PreparedMsg encoded on the stream is compressed with the compressor the
// stream started with, which is none unless the request was compressed
// (grpc-go then starts with the request's). In that rare case the message
// goes out compressed like the others (README: "Known differences").
func (s *grpcgoStream) sendUncompressed(b mem.BufferSlice) error {
	if st, ok := grpc.ServerTransportStreamFromContext(s.ctx).(recvCompressor); ok {
		if rc := st.RecvCompress(); rc != "" && rc != identity {
			return s.ss.SendMsg(b)
		}
	}
	var msg grpc.PreparedMsg
	if err := msg.Encode(s.ss, b); err != nil {
		return err
	}
	return s.ss.SendMsg(&msg)
}

// SetCompressor fails silently once the initial metadata is sent, as
// set_compression() does in grpcio then.
func (s *grpcgoStream) SetCompressor(name string) {
	if name == compressNone {
		name = identity
	}
	if grpc.SetSendCompressor(s.ctx, name) != nil && name != identity {
		_ = grpc.SetSendCompressor(s.ctx, identity)
	}
}

func (s *grpcgoStream) SendCompressor() string {
	if st, ok := grpc.ServerTransportStreamFromContext(s.ctx).(sendCompressor); ok {
		if c := st.SendCompress(); c != identity {
			return c
		}
	}
	return compressNone
}

// Flush: grpc-go's transport writes on its own (its loopy writer).
func (s *grpcgoStream) Flush() {}

func (s *grpcgoStream) Finish(st *status.Status, trailer Metadata) {
	if len(trailer) > 0 {
		s.ss.SetTrailer(trailer.md())
	}
	s.status = st.Err()
	if st != nil && st.Code() == codes.OK && st.Message() != "" {
		s.status = okWithDetails{st}
	}
}

// okWithDetails is the error a handler returns to grpc-go's server for a
// call that ends OK with details: grpc-go writes the status an error
// carries (status.FromError), and a nil error as OK with none (st.Err()
// of an OK status is nil), where grpcio's servers send the details.
type okWithDetails struct{ st *status.Status }

func (e okWithDetails) Error() string              { return e.st.Message() }
func (e okWithDetails) GRPCStatus() *status.Status { return e.st }

// sendCompressor and recvCompressor are what grpc-go's transport stream
// tells of its encodings.
type (
	sendCompressor interface{ SendCompress() string }
	recvCompressor interface{ RecvCompress() string }
)
