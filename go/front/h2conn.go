package front

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The receive windows the h2 transport grants are each stream's
// (Limits.StreamWindow, SETTINGS_INITIAL_WINDOW_SIZE) and the connection's.
// They are given back as data is taken (a quarter at a time), so they bound
// what a client has in flight, not what a call may send; a request stream
// whose messages wait for credit stops getting its stream window back
// (h2Stream.backlog), so a client that outruns its handler is held back by
// flow control.
const h2ConnWindow = 4 << 20

// h2HeaderListLimit is the largest header block the h2 transport decodes:
// twice the per-call metadata limit (which admission enforces with
// grpcio's RESOURCE_EXHAUSTED, so it must fit), at least 1 MiB, at most
// grpc-go's 16 MiB. Past it the stream is reset, and a client that goes on
// sending CONTINUATION frames loses its connection (readHeaderBlock, as
// x/net's Framer does), so a header flood costs a connection about this
// much, not grpc-go's 16 MiB.
func h2HeaderListLimit(l *Limits) uint32 {
	return min(max(2*l.MaxHeaderListSize, 1<<20), transportHeaderListLimit)
}

// maxReadyWait bounds how many frames a call handed over on the reader
// waits for (readFrames): a client that keeps the socket full doesn't hold
// its calls back.
const maxReadyWait = 32

// h2DrainPing is the PING payload that marks a graceful GOAWAY's first
// phase; its ack (or h2DrainTimeout) starts the second.
var h2DrainPing = [8]byte{'p', 'g', 'n', 'd', 'r', 'a', 'i', 'n'}

const h2DrainTimeout = time.Second

// h2KeepalivePing is the PING payload of the server's keepalive pings.
var h2KeepalivePing = [8]byte{}

// goAwayReason is why goAway ends a connection, in what grpcio's server
// writes (which grpcio's clients log when the code isn't NO_ERROR): the
// debug text of the first GOAWAY frame (empty: no first frame, and no
// drain PING, as grpcio's server sends for an idle connection) and of the
// second, and the second's error code; now: the second follows at once, as
// no call is left to wait for (grpcio's closes such a connection at once
// too).
type goAwayReason struct {
	first, second string
	code          http2.ErrCode
	now           bool
}

var (
	// server.stop(grace): calls in flight get the grace.
	goAwayShutdown = goAwayReason{"Server shutdown", "Server shutdown", http2.ErrCodeNo, false}
	// server.stop(None): calls in flight are cancelled.
	goAwayCancelAll = goAwayReason{"Server shutdown", "Cancelling all calls", http2.ErrCodeInternal, true}
	// grpc.max_connection_idle_ms: no call is in flight.
	goAwayIdle = goAwayReason{"", "connection idle", http2.ErrCodeInternal, true}
	// grpc.max_connection_age_ms.
	goAwayMaxAge = goAwayReason{"max_age", "max_age", http2.ErrCodeNo, false}
)

// h2Conn is one connection of the h2 transport. Its reader goroutine
// (serve) is the only one that reads the socket; sends go through w.
type h2Conn struct {
	srv *h2Server
	// raw is the accepted socket (closing it ends everything); nc is what
	// the reader reads: raw, or the TLS connection over it.
	raw      net.Conn
	sock     *h2Socket // raw, written without waiting for the peer
	nc       net.Conn
	cs       *connState // nil for a connection no listener of ours accepted
	security *ConnSecurity
	w        *h2Writer

	// Reader only.
	br  *bufio.Reader
	fr  *http2.Framer
	hdr headerReader // header blocks, read past the Framer (h2headerread.go)
	// readyCalls are calls handed over on the reader (inline), run once the
	// reader has taken every frame already read (see readFrames).
	readyCalls []*h2Stream
	readyWait  int // frames read since the first of readyCalls
	// owed counts the replies the reader queued (acks, refusals) while the
	// client had not read everything sent before: at maxOwedReplies the
	// reader stops reading until it has (see readFrames).
	owed int
	// streamSlab is where the reader takes its next streams' memory (see
	// newStream).
	streamSlab []h2Stream
	pings      pingPolicy
	recvWindow int64 // connection window left to the client
	connUnack  int
	// lastRead is when a frame last arrived (keepalive), in Unix ns.
	lastRead atomic.Int64
	// goAwaySent: a GOAWAY with an error went out; the close lingers.
	goAwaySent atomic.Bool
	// trueBinary: the client takes -bin values raw (see
	// settingTrueBinary), from its SETTINGS.
	trueBinary atomic.Bool
	// maxStreamID is the largest stream id the client opened (written by
	// the reader only; read by finalGoAway).
	maxStreamID atomic.Uint32

	mu      sync.Mutex // guards what follows, and h2Stream.dispatched/released
	streams map[uint32]*h2Stream
	// peerRST: the streams of c.streams reset on the wire (by the client,
	// or by the server: a stream error, or a deadline that passed before
	// the call was handed to the front), until released; a subset of
	// c.streams' keys. Closed for HTTP/2, they don't count toward
	// max_concurrent_streams (tooManyStreamsLocked).
	peerRST map[uint32]bool
	// draining: the first GOAWAY went out, for goAwayWhy; goneAway: the
	// final one did, with lastGood as its last stream id; closed: the
	// socket is closed.
	draining, goneAway, closed bool
	goAwayWhy                  goAwayReason
	// ready: the client's preface and first SETTINGS were read (until then
	// a stop just closes).
	ready     bool
	lastGood  uint32
	idleSince time.Time
	// kick wakes the timer goroutine: the drain state changed, or a drained
	// connection's last call ended.
	kick chan struct{}

	// settingsDue is when the client must have acknowledged our SETTINGS
	// (Limits.settingsTimeout after they were queued; set by the
	// handshake, read by timers), settingsAcked whether it has (the
	// reader). Last, out of the way of the fields each call touches.
	settingsDue   time.Time
	settingsAcked atomic.Bool
}

func newH2Conn(s *h2Server, nc net.Conn) *h2Conn {
	c := &h2Conn{
		srv:        s,
		raw:        nc,
		nc:         nc,
		security:   plaintextSecurity,
		streams:    make(map[uint32]*h2Stream),
		peerRST:    make(map[uint32]bool),
		recvWindow: h2ConnWindow,
		kick:       make(chan struct{}, 1),
		idleSince:  time.Now(),
	}
	if lc, ok := nc.(*conn); ok {
		c.cs = lc.remote
	}
	c.sock = newH2Socket(nc)
	c.nc = c.sock
	c.w = newH2Writer(c.sock, func(err error) { c.close(err) })
	c.sock.onDrained = c.w.socketDrained
	return c
}

// serve runs the connection: handshake, then frames until it closes.
func (c *h2Conn) serve() {
	defer c.srv.forget(c)
	if err := c.handshake(); err != nil {
		c.close(err)
		return
	}
	go c.timers()
	err := c.readFrames()
	// The reader is done: a call still waiting for its request will never
	// get it. Such calls end first, their places under
	// maximum_concurrent_rpcs back at once, not after endCallsLeft's wait
	// for the others.
	c.endUnhanded()
	switch {
	case errors.Is(err, io.EOF):
		// The client shut its side (or a proxy passed its FIN on): no
		// more frames can come, but answers can still go. As grpcio's
		// server, its open calls end UNAVAILABLE "Socket closed", told.
		c.endCallsLeft(detailsSocketClosed)
	case errors.Is(err, errTooManyPings):
		// After the GOAWAY, as grpcio's server ends them (its client reads
		// UNAVAILABLE "Too many pings", not the connection's loss).
		c.endCallsLeft(detailsTooManyPings)
	}
	c.close(err)
	c.runReady() // they end at once: the connection is closed
	c.mu.Lock()
	pending := make([]*h2Stream, 0, len(c.streams))
	for _, s := range c.streams {
		pending = append(pending, s)
	}
	c.mu.Unlock()
	for _, s := range pending {
		s.cut() // the front's: their requests end here
	}
}

// endUnhanded ends, CANCELLED, the calls of a connection whose reader is
// done that the front was never handed (only the reader hands them over).
func (c *h2Conn) endUnhanded() {
	c.mu.Lock()
	var unhanded []*h2Stream
	for _, s := range c.streams {
		if !s.dispatched {
			unhanded = append(unhanded, s)
		}
	}
	c.mu.Unlock()
	for _, s := range unhanded {
		s.cut()
		c.endStream(s, codes.Canceled, true)
	}
}

// handshake does TLS (for a TLS listener, insisting on ALPN h2), reads the
// client preface and its first SETTINGS, and sends ours, all within the
// handshake timeout.
func (c *h2Conn) handshake() (err error) {
	limits := c.srv.limits
	handshakeDue := time.Now().Add(limits.HandshakeTimeout)
	_ = c.nc.SetDeadline(handshakeDue)
	lc, _ := c.raw.(*conn)
	switch {
	case lc == nil || lc.sec == nil:
	case lc.sec.local != localNone:
		// grpcio's local credentials: no TLS, only a check of the address
		// the connection arrived at.
		if err := checkLocal(lc.sec.local, lc.Conn.LocalAddr()); err != nil {
			return err
		}
		c.security = localSecurity
	default:
		// The port's configuration offers h2 in ALPN (tlssource.go).
		tc := tls.Server(c.sock, lc.sec.tls)
		if err := tc.Handshake(); err != nil {
			return fmt.Errorf("TLS handshake: %w", err)
		}
		state := tc.ConnectionState()
		if state.NegotiatedProtocol != "h2" {
			return errors.New("TLS handshake: the client did not negotiate h2 (ALPN)")
		}
		c.security = connSecurity(&state, c.cs)
		c.nc = tc
		c.w.mu.Lock()
		c.w.nc = tc
		c.w.mu.Unlock()
	}
	// Our SETTINGS go first, before the client's preface is read, so that
	// a client sending calls at once learns the stream limit as early as
	// it can (calls past it are refused).
	c.w.control(func(b []byte) []byte {
		b = appendSettings(b,
			http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: limits.MaxConcurrentStreams},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: limits.StreamWindow},
			// grpcio's value, the per-call metadata limit: clients that
			// honour it refuse a call over it themselves, as they do
			// against grpcio (a grpcio client with grpcio's words, a
			// grpc-go one with INTERNAL); the reader decodes more
			// (h2HeaderListLimit) for those that don't, which admission
			// refuses.
			http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: limits.MaxHeaderListSize},
			http2.Setting{ID: settingTrueBinary, Val: 1},
		)
		return appendWindowUpdate(b, 0, h2ConnWindow-65535)
	})
	// As grpc-core's settings watchdog: a client that hasn't acknowledged
	// them by settingsDue is told SETTINGS_TIMEOUT and cut off, whether it
	// sent its preface or not (the handshake timeout, if sooner, still
	// closes first, silently).
	c.settingsDue = time.Now().Add(limits.settingsTimeout())
	if c.settingsDue.Before(handshakeDue) {
		_ = c.nc.SetReadDeadline(c.settingsDue) // writes keep theirs: the GOAWAY goes out
	}
	defer func() {
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(c.settingsDue) {
			c.goAwayError(http2.ErrCodeSettingsTimeout, "settings_timeout")
		}
	}()
	// Large enough to peek a whole frame of h2MaxReadFrame (headersDirect).
	c.br = bufio.NewReaderSize(c.nc, 32<<10)
	br := c.br
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(br, preface[:]); err != nil {
		return fmt.Errorf("reading the client preface: %w", err)
	}
	if string(preface[:]) != http2.ClientPreface {
		return errors.New("the client preface is not HTTP/2's")
	}
	c.fr = http2.NewFramer(nil, br)
	c.hdr = newHeaderReader(h2HeaderListLimit(limits))
	// The first frame is the Framer's, a header block included (one only
	// ever ends the connection); every later one is read past it
	// (headersDirect).
	c.fr.ReadMetaHeaders = c.hdr.dec
	c.fr.MaxHeaderListSize = c.hdr.limit
	// Our SETTINGS keep HTTP/2's default largest frame; a larger one is a
	// FRAME_SIZE_ERROR.
	c.fr.SetMaxReadFrameSize(h2MaxReadFrame)
	f, err := c.fr.ReadFrame()
	c.fr.ReadMetaHeaders = nil
	c.hdr.dec.SetEmitFunc(c.hdr.field)
	if err != nil {
		return fmt.Errorf("reading the client's first SETTINGS: %w", err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		c.goAwayError(http2.ErrCodeProtocol, "the first frame after the preface must be SETTINGS")
		return errors.New("the client's first frame is not SETTINGS")
	}
	// Ready before the ACK is queued: a client that has seen the ACK is
	// told why the connection ends (GOAWAY), not just closed on.
	c.mu.Lock()
	c.ready = true
	c.mu.Unlock()
	if err := c.settings(sf); err != nil {
		return err
	}
	_ = c.nc.SetDeadline(time.Time{})
	c.lastRead.Store(time.Now().UnixNano())
	return nil
}

// maxOwedReplies is how many replies to its own frames a client that
// doesn't read may be owed before its connection's reader stops reading
// (grpc-go's transport stops at 50 queued, too): a flood of PINGs costs a
// connection a few KiB, not the backlog's bound. A client that reads is
// owed nothing for long: its count restarts each time it has read all.
const maxOwedReplies = 50

// reply queues the reader's answer to a client frame: a PING ack (later:
// it may wait for the next write, controlLater) or a stream refused,
// counted against a client that has not read what it was sent (owed).
// The reader's goroutine only.
func (c *h2Conn) reply(later bool, f func(b []byte) []byte) {
	if c.sock.backlog.Load() > 0 {
		c.owed++
	}
	if later {
		c.w.controlLater(f)
	} else {
		c.w.control(f)
	}
}

// readFrames reads and acts on frames until the connection fails or
// closes.
func (c *h2Conn) readFrames() error {
	for {
		switch behind := c.sock.backlog.Load(); {
		case behind == 0:
			c.owed = 0 // the client has read every reply
		case behind > maxReadBacklog || c.owed >= maxOwedReplies:
			// The peer doesn't read what it is sent: read nothing more
			// from it (what it asks for, acks above all, would pile up)
			// until it has read some, or, for a peer that keeps asking
			// for replies (PINGs, SETTINGS, streams refused), all. The
			// calls already read go first.
			if len(c.readyCalls) > 0 {
				c.runReady()
			}
			if c.owed >= maxOwedReplies {
				c.sock.waitBelow(0)
				c.owed = 0
			} else {
				c.sock.waitBelow(maxPending)
			}
		}
		if err := c.readFrame(); err != nil {
			return err
		}
		// The calls of frames read together reach the front together,
		// once the reader has taken all of them: their events enter the
		// queue as one burst (one trip to Python), and streams opened in
		// that burst all count against max_concurrent_streams.
		if len(c.readyCalls) > 0 {
			if c.readyWait++; c.br.Buffered() == 0 || c.readyWait >= maxReadyWait {
				c.runReady()
			}
		}
	}
}

// readFrame reads the next frame and acts on it: a header block
// (headersDirect) and a plain DATA frame (dataDirect) itself, any other
// through the Framer and its checks. An error closes the connection.
func (c *h2Conn) readFrame() error {
	if direct, err := c.headersDirect(); direct || err != nil {
		return err
	}
	if direct, err := c.dataDirect(); direct || err != nil {
		return err
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		return c.readError(err)
	}
	c.lastRead.Store(time.Now().UnixNano())
	return c.frame(f)
}

// readError acts on an error reading a frame (the Framer's, or
// headersDirect's of the same kinds): a stream error resets the stream
// and the connection goes on (nil); a connection error sends GOAWAY with
// its code; any error but a stream error ends the connection.
func (c *h2Conn) readError(err error) error {
	var se http2.StreamError
	if errors.As(err, &se) {
		// A HEADERS frame refused as a stream error still opened
		// its stream (its later frames are not on an idle one).
		if se.StreamID%2 == 1 && se.StreamID > c.maxStreamID.Load() {
			c.maxStreamID.Store(se.StreamID)
		}
		c.streamError(se.StreamID, se.Code)
		return nil
	}
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		c.goAwayError(http2.ErrCode(ce), err.Error())
	}
	return err
}

// runReady hands the calls queued by dispatch to the front.
func (c *h2Conn) runReady() {
	for i, s := range c.readyCalls {
		c.readyCalls[i] = nil
		s.serveCall()
	}
	c.readyCalls, c.readyWait = c.readyCalls[:0], 0
}

// frame acts on one frame; an error closes the connection (after a GOAWAY
// saying why, where one is due).
func (c *h2Conn) frame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.data(f.StreamID, int(f.Header().Length), f.StreamEnded(), &framePayload{p: f.Data(), n: len(f.Data())})
	case *http2.SettingsFrame:
		if f.IsAck() {
			c.settingsAcked.Store(true)
			return nil
		}
		return c.settings(f)
	case *http2.PingFrame:
		if f.IsAck() {
			switch f.Data {
			case h2DrainPing:
				c.finalGoAway()
			case h2KeepalivePing:
				// The next keepalive ping is due KeepaliveTime from now,
				// not when the timeout would have been checked.
				signal(c.kick)
			}
			return nil
		}
		tooSoon := c.pingTooSoon()
		c.reply(true, func(b []byte) []byte { return appendPing(b, true, f.Data) })
		if tooSoon {
			c.goAwayError(http2.ErrCodeEnhanceYourCalm, "too_many_pings")
			return errTooManyPings
		}
	case *http2.WindowUpdateFrame:
		return c.windowUpdate(f)
	case *http2.RSTStreamFrame:
		c.peerReset2(f.StreamID)
	case *http2.GoAwayFrame:
		// The client is leaving; its calls in flight go on.
	case *http2.PushPromiseFrame:
		c.goAwayError(http2.ErrCodeProtocol, "a client must not send PUSH_PROMISE")
		return errors.New("PUSH_PROMISE from the client")
	}
	return nil
}

// settings applies the client's SETTINGS and acknowledges them.
func (c *h2Conn) settings(f *http2.SettingsFrame) error {
	var bad error
	_ = f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			bad = err
			return err
		}
		return nil
	})
	if bad != nil {
		var ce http2.ConnectionError
		code := http2.ErrCodeProtocol
		if errors.As(bad, &ce) {
			code = http2.ErrCode(ce)
		}
		c.goAwayError(code, bad.Error())
		return bad
	}
	// The settings take effect and their ACK is queued in one step, under
	// the writer's lock: no DATA sent on a window they grew can reach the
	// client before the ACK (grpc-core counts its windows by what it has
	// seen acknowledged).
	c.mu.Lock()
	c.w.mu.Lock()
	_ = f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingInitialWindowSize:
			// Every open stream's send window moves by the change, as
			// HTTP/2 says.
			delta := int64(s.Val) - c.w.initialWindow
			c.w.initialWindow = int64(s.Val)
			for _, st := range c.streams {
				st.sendWindow += delta
			}
		case http2.SettingMaxFrameSize:
			c.w.maxFrame = int(s.Val)
		case http2.SettingHeaderTableSize:
			c.w.henc.SetMaxDynamicTableSizeLimit(s.Val)
		case settingTrueBinary:
			c.trueBinary.Store(s.Val == 1)
		}
		return nil
	})
	c.w.windowWait.Broadcast()
	if c.w.err == nil {
		c.w.buf = appendSettingsAck(c.w.buf)
		c.w.carryOwedLocked()
		if c.sock.backlog.Load() > 0 {
			c.owed++ // a reply, as reply counts them
		}
	}
	c.w.mu.Unlock()
	// Written once c.mu is released: a write that fails closes the
	// connection (h2Writer.onError), which takes c.mu.
	c.mu.Unlock()
	c.w.flushNow()
	return nil
}

func (c *h2Conn) windowUpdate(f *http2.WindowUpdateFrame) error {
	if f.StreamID == 0 {
		if !c.w.growConn(f.Increment) {
			c.goAwayError(http2.ErrCodeFlowControl, "connection window overflow")
			return errors.New("connection window overflow")
		}
		return nil
	}
	if s := c.stream(f.StreamID); s != nil && !c.w.growStream(s, f.Increment) {
		c.streamError(f.StreamID, http2.ErrCodeFlowControl)
	}
	return nil
}

func (c *h2Conn) stream(id uint32) *h2Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

// headers starts a call (or, on an open stream, takes the client's
// trailers as its half-close). It keeps nothing of hb.fields (parseRequest
// copies what it keeps).
func (c *h2Conn) headers(hb headerBlock) error {
	id := hb.streamID
	if id%2 == 0 || id <= c.maxStreamID.Load() {
		if s := c.stream(id); s != nil {
			// Trailers end the stream and carry no pseudo-header
			// (RFC 9113 8.1); fields has its pseudo-headers first.
			if !hb.endStream || len(hb.fields) > 0 && hb.fields[0].IsPseudo() {
				c.streamError(id, http2.ErrCodeProtocol)
				return nil
			}
			return c.requestData(s, &framePayload{}, true)
		}
		// An even id, or one below a stream already opened: RFC 9113
		// 5.1.1 makes either a connection error.
		c.goAwayError(http2.ErrCodeProtocol, fmt.Sprintf("illegal stream id %d", id))
		return errors.New("illegal stream id")
	}
	c.maxStreamID.Store(id)
	c.mu.Lock()
	refuse := c.goneAway && id > c.lastGood
	tooMany := c.tooManyStreamsLocked()
	c.mu.Unlock()
	if refuse {
		return nil // after the final GOAWAY: ignored, as HTTP/2 says
	}
	if hb.truncated {
		c.reply(false, func(b []byte) []byte { return appendRSTStream(b, id, http2.ErrCodeFrameSize) })
		return nil
	}
	if tooMany {
		c.reply(false, func(b []byte) []byte { return appendRSTStream(b, id, http2.ErrCodeRefusedStream) })
		return nil
	}
	s := c.newStream(id)
	req := &s.req
	if rej := parseRequest(req, hb.fields); rej != nil {
		if rej.rst {
			c.reply(false, func(b []byte) []byte { return appendRSTStream(b, id, http2.ErrCodeProtocol) })
		} else {
			c.earlyAbort(id, rej.httpStatus, rej.st, !hb.endStream)
		}
		return nil
	}
	s.ctx = &s.base
	if req.hasTimeout {
		s.base.deadline = time.Now().Add(req.timeout)
	}
	if cs := c.srv.stats; cs != nil {
		s.stats = cs.Begin(req.method, time.Now())
	}
	ctx, err := c.srv.h.admit(s.ctx, req.header, c.cs)
	if err == nil && c.srv.limits.DisabledCompression != nil {
		// grpc.compression_enabled_algorithms_bitset: a request in a
		// disabled encoding is refused, as grpcio refuses it.
		if err = c.srv.limits.DisabledCompression.check(req.encoding); err != nil {
			c.srv.h.m.callsRefused.Add(1)
		}
	}
	if err != nil {
		c.endUnstarted(s, status.Convert(err), !hb.endStream)
		return nil
	}
	if req.hasTimeout && req.timeout <= 0 {
		c.endUnstarted(s, deadlineStatus, !hb.endStream)
		return nil
	}
	s.ctx = ctx
	s.headersPlan = c.srv.h.planAtHeaders(req.method)
	c.mu.Lock()
	c.w.mu.Lock()
	s.sendWindow = c.w.initialWindow
	c.w.mu.Unlock()
	if req.hasTimeout {
		// A call still waiting for its request at its deadline is reset,
		// as grpc-go's transport does. Armed under mu, as endLocked stops
		// it; expire waits for mu if the deadline has passed already.
		s.timer = time.AfterFunc(req.timeout, func() { c.expire(s) })
	}
	c.streams[id] = s
	if c.closed {
		s.endLocked() // close has ended those it held (no hook yet); see streamContext
	}
	c.idleSince = time.Time{}
	c.mu.Unlock()
	if hb.endStream {
		s.halfClose()
		c.dispatch(s)
		return nil
	}
	c.w.oweWindow() // grpc-core's call asks for its first message
	if s.atHeaders {
		c.dispatch(s)
	}
	return nil
}

// streamSlabSize is how many streams' memory the reader allocates at once.
const streamSlabSize = 8

// newStream is a new stream's memory, taken from the connection's slab:
// one allocation for streamSlabSize streams, not one per call. Each slot
// is used once and never reused, so nothing outlives its stream's users
// by mistake; the price is that a slab stays allocated while any of its
// streams is referenced: a long-lived stream keeps at most
// streamSlabSize-1 ended neighbours' memory (about 1.3 KiB each) and what
// they still point to (headers, a small request) from being collected.
// Reader only.
func (c *h2Conn) newStream(id uint32) *h2Stream {
	if len(c.streamSlab) == 0 {
		c.streamSlab = make([]h2Stream, streamSlabSize)
	}
	s := &c.streamSlab[0]
	c.streamSlab = c.streamSlab[1:]
	s.c, s.id = c, id
	return s
}

// earlyAbort answers a request the transport refuses before any call
// exists: HTTP status, gRPC status, and RST_STREAM if the client is still
// sending.
func (c *h2Conn) earlyAbort(id uint32, httpStatus int, st *status.Status, rst bool) {
	fields := []headerField{
		{":status", fmt.Sprint(httpStatus)},
		{"content-type", "application/grpc"},
		{"grpc-status", fmt.Sprint(int(st.Code()))},
		{"grpc-message", encodeGRPCMessage(st.Message())},
	}
	c.w.mu.Lock()
	if c.w.err == nil {
		c.w.appendHeadersLocked(id, true, fields)
		if rst {
			c.w.buf = appendRSTStream(c.w.buf, id, http2.ErrCodeNo)
		}
		c.w.flushLocked()
	}
	c.w.mu.Unlock()
}

// endUnstarted answers a call the front refused at admission.
func (c *h2Conn) endUnstarted(s *h2Stream, st *status.Status, rst bool) {
	c.earlyAbort(s.id, http.StatusOK, st, rst)
	s.endContext()
	if cs := c.srv.stats; cs != nil && s.stats != nil {
		cs.End(s.stats, time.Now(), st.Code(), false)
	}
}

// dispatch hands a call to the front. A call the front serves without
// waiting (inline: it leaves the call to be driven by Python's answers, or
// refuses it) is handed over on the reader (runReady), so it reaches Python
// with no goroutine hop; any other goes to a worker, which owns it from here
// on.
func (c *h2Conn) dispatch(s *h2Stream) {
	c.mu.Lock()
	if s.released || s.dispatched {
		c.mu.Unlock()
		return
	}
	s.dispatched = true
	c.mu.Unlock()
	c.srv.handlers.Add(1)
	if s.inline {
		c.readyCalls = append(c.readyCalls, s)
		return
	}
	c.srv.workers.run(s)
}

// takeStreamWindow accounts for n bytes of s's request taken by the reader:
// given back to the client at once, unless messages wait to be handed over
// (for credit, or for the call to start): then when they are.
func (c *h2Conn) takeStreamWindow(s *h2Stream, n int) {
	s.rmu.Lock()
	if len(s.msgs) > 0 {
		s.backlog += n
		s.rmu.Unlock()
		return
	}
	s.rmu.Unlock()
	c.returnStreamWindow(s, n)
}

// returnStreamWindow gives n bytes of s's window back to the client, a
// quarter of the window at a time.
func (c *h2Conn) returnStreamWindow(s *h2Stream, n int) {
	c.mu.Lock()
	s.recvUnack += n
	incr := 0
	if s.recvUnack >= int(c.srv.limits.StreamWindow/4) && !s.released {
		incr, s.recvUnack = s.recvUnack, 0
		s.recvGiven += incr
	}
	c.mu.Unlock()
	if incr > 0 {
		c.w.windowUpdate(s.id, uint32(incr))
	}
}

// tooManyStreamsLocked reports whether a new stream must be refused
// (REFUSED_STREAM), c.mu held. A stream reset on the wire (either way) is
// closed for HTTP/2 and leaves the count at once (RFC 9113 5.1.2): its
// client may open the next stream in the same write as the reset. Such a
// stream stays in c.streams until the front lets go of it (soon, but not
// at once), though, so, against a client resetting streams as fast as it
// opens them (rapid reset), those are bounded too: at the limit, or
// resetHeadroom where the limit is smaller (so that a small limit doesn't
// refuse calls while the front catches up).
func (c *h2Conn) tooManyStreamsLocked() bool {
	limit := int(c.srv.limits.MaxConcurrentStreams)
	reset := len(c.peerRST)
	return len(c.streams)-reset >= limit || reset >= max(limit, resetHeadroom)
}

// resetHeadroom is how many reset streams a connection may hold whatever
// its limit of concurrent streams (see tooManyStreamsLocked).
const resetHeadroom = 100

// streamError resets one stream with code (RST_STREAM); the call, if any,
// ends as the client's reset would end it.
func (c *h2Conn) streamError(id uint32, code http2.ErrCode) {
	c.w.control(func(b []byte) []byte { return appendRSTStream(b, id, code) })
	c.peerReset2(id)
}

// peerReset2 ends a stream reset on the wire (by the client, or by
// streamError): its context ends, and a call not yet handed to the front
// ends here.
func (c *h2Conn) peerReset2(id uint32) {
	c.mu.Lock()
	s := c.streams[id]
	if s == nil {
		c.mu.Unlock()
		return
	}
	c.peerRST[id] = true
	mine := !s.dispatched
	hook := s.endLocked()
	c.mu.Unlock()
	tellEnd(hook)
	s.cut()
	c.w.wake()
	if mine {
		c.endStream(s, codes.Canceled, true)
	}
}

// peerReset reports whether s was reset on the wire.
func (c *h2Conn) peerReset(s *h2Stream) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peerRST[s.id] || c.closed
}

// expire runs at the deadline of a call that has one, unless endLocked has
// stopped its timer first. It ends the stream's context with
// context.DeadlineExceeded; ends the call if that came before it was
// handed to the front (with status DEADLINE_EXCEEDED, then RST_STREAM
// NO_ERROR for the request it still waited for, as grpcio's server ends
// it; grpc-go's transport resets it with CANCEL); and tells the call's end
// hook (the only teller of a deadline).
func (c *h2Conn) expire(s *h2Stream) {
	c.mu.Lock()
	s.base.cancel(context.DeadlineExceeded)
	mine := !s.dispatched && !s.released && !c.peerRST[s.id]
	if mine {
		c.peerRST[s.id] = true // the reader drops the rest of its request
	}
	hook := s.takeEndHookLocked()
	c.mu.Unlock()
	tellEnd(hook)
	if mine {
		c.earlyAbort(s.id, http.StatusOK, deadlineStatus, true)
		c.endStream(s, codes.DeadlineExceeded, false)
	}
	c.w.wake()
}

// endStream forgets an ended stream (once) and reports its end.
func (c *h2Conn) endStream(s *h2Stream, code codes.Code, reset bool) {
	c.mu.Lock()
	if s.released {
		c.mu.Unlock()
		return
	}
	s.released = true
	if s.slot && !s.dispatched {
		c.srv.h.calls.slots.give() // still the transport's (headersPlan)
	}
	delete(c.streams, s.id)
	delete(c.peerRST, s.id)
	idle := len(c.streams) == 0
	if idle {
		c.idleSince = time.Now()
	}
	// Only a drained connection's close waits for idleness; the idle
	// timer looks again by itself (see timers), so that a connection
	// going idle between calls costs no wake-up.
	kick := idle && c.goneAway
	hook := s.endLocked()
	c.mu.Unlock()
	tellEnd(hook)
	if cs := c.srv.stats; cs != nil && s.stats != nil {
		s.reportMessages(cs)
		cs.End(s.stats, time.Now(), code, reset)
	}
	if kick {
		signal(c.kick)
	}
}

// goAway starts ending the connection, gracefully: GOAWAY with the largest
// id and a PING (unless why has no first frame), then GOAWAY with the last
// stream taken (finalGoAway), and the connection closes when its calls are
// done. why: what the frames say.
func (c *h2Conn) goAway(why goAwayReason) {
	c.mu.Lock()
	if c.draining || c.closed || !c.ready {
		ready := c.ready
		c.mu.Unlock()
		if !ready {
			c.close(errH2Stopped) // still handshaking
		}
		return
	}
	c.draining, c.goAwayWhy = true, why
	c.mu.Unlock()
	if why.first != "" {
		c.w.control(func(b []byte) []byte {
			b = appendGoAway(b, 1<<31-1, http2.ErrCodeNo, why.first)
			return appendPing(b, false, h2DrainPing)
		})
	}
	if why.now {
		c.finalGoAway()
	} else {
		time.AfterFunc(h2DrainTimeout, c.finalGoAway)
	}
	signal(c.kick)
}

// finalGoAway sends the second GOAWAY: streams after the last one taken are
// ignored from now on.
func (c *h2Conn) finalGoAway() {
	c.mu.Lock()
	if c.goneAway || c.closed {
		c.mu.Unlock()
		return
	}
	c.goneAway, c.lastGood = true, c.maxStreamID.Load()
	last, why := c.lastGood, c.goAwayWhy
	idle := len(c.streams) == 0
	c.mu.Unlock()
	c.w.control(func(b []byte) []byte { return appendGoAway(b, last, why.code, why.second) })
	if idle {
		signal(c.kick)
	}
}

// goAwayError tells the client why the connection is closing.
func (c *h2Conn) goAwayError(code http2.ErrCode, debug string) {
	if len(debug) > 256 {
		debug = debug[:256]
	}
	c.goAwaySent.Store(true)
	c.w.control(func(b []byte) []byte { return appendGoAway(b, c.maxStreamID.Load(), code, debug) })
}

// close closes the connection (once): every call on it ends.
func (c *h2Conn) close(err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	var hooks []wireEndHook
	for _, s := range c.streams {
		if h := s.endLocked(); h != nil {
			hooks = append(hooks, h)
		}
	}
	c.mu.Unlock()
	for _, h := range hooks {
		h.wireEnded()
	}
	if c.goAwaySent.Load() {
		// The GOAWAY saying why may wait behind the flusher's burst.
		c.w.settle(time.Second)
	}
	c.w.fail(err)
	signal(c.kick)
	if c.goAwaySent.Load() {
		go c.linger()
		return
	}
	c.raw.Close()
}

// linger closes a connection that was told why (GOAWAY) so that the client
// can read it: closing a socket with unread input resets it, and a reset
// can discard what the client has not read yet. The GOAWAY is written, our
// side shut, and the client's input read and dropped for up to a second.
func (c *h2Conn) linger() {
	defer c.raw.Close()
	c.sock.waitWritten(time.Second)
	inner := c.raw
	if lc, ok := inner.(*conn); ok {
		inner = lc.Conn
	}
	if cw, ok := inner.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.raw.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.Copy(io.Discard, io.LimitReader(c.raw, 1<<20))
}

// timers runs the connection's clocks: keepalive pings and their timeout,
// idleness, maximum age and its grace, and the close after a graceful
// GOAWAY once no call is left.
func (c *h2Conn) timers() {
	l := c.srv.limits
	now := time.Now()
	var ageAt, graceAt time.Time
	if l.MaxConnectionAge != infinity && l.MaxConnectionAge > 0 {
		// ±10% so that connections made together don't all leave together.
		jitter := time.Duration(float64(l.MaxConnectionAge) * (rand.Float64()*0.2 - 0.1))
		ageAt = now.Add(l.MaxConnectionAge + jitter)
	}
	pingSent := time.Time{}
	tick := time.NewTimer(time.Hour)
	defer tick.Stop()
	for {
		now = time.Now()
		c.mu.Lock()
		closed, draining, goneAway := c.closed, c.draining, c.goneAway
		idleSince, active := c.idleSince, len(c.streams)
		c.mu.Unlock()
		if closed {
			return
		}
		if goneAway && active == 0 {
			// Every call answered: the last frames go out, then the
			// connection closes.
			c.w.settle(time.Second)
			c.sock.waitWritten(time.Second)
			c.close(errH2Stopped)
			return
		}
		next := now.Add(time.Hour)
		if !c.settingsAcked.Load() {
			if !now.Before(c.settingsDue) {
				c.goAwayError(http2.ErrCodeSettingsTimeout, "settings_timeout")
				c.close(errors.New("the client did not acknowledge the server's SETTINGS in time"))
				return
			}
			next = earliest(next, c.settingsDue)
		}
		// Keepalive: a ping after KeepaliveTime without frames; the
		// connection closes if nothing arrives within KeepaliveTimeout.
		last := time.Unix(0, c.lastRead.Load())
		if !pingSent.IsZero() {
			if last.After(pingSent) {
				pingSent = time.Time{}
			} else if now.Sub(pingSent) >= l.KeepaliveTimeout {
				c.close(errors.New("keepalive ping not acknowledged"))
				return
			} else {
				next = earliest(next, pingSent.Add(l.KeepaliveTimeout))
			}
		}
		if pingSent.IsZero() {
			if due := last.Add(l.KeepaliveTime); now.Before(due) {
				next = earliest(next, due)
			} else if active == 0 && !l.KeepalivePermitNoCalls {
				// As grpcio: a connection without calls is pinged only
				// with grpc.keepalive_permit_without_calls. Look again
				// one period from now (a call that starts meanwhile is
				// pinged within two periods, and starting it costs no
				// wake-up here).
				next = earliest(next, now.Add(l.KeepaliveTime))
			} else {
				pingSent = now
				c.w.control(func(b []byte) []byte { return appendPing(b, false, h2KeepalivePing) })
				next = earliest(next, now.Add(l.KeepaliveTimeout))
			}
		}
		if !draining && l.MaxConnectionIdle != infinity && l.MaxConnectionIdle > 0 {
			if active == 0 && !idleSince.IsZero() {
				if due := idleSince.Add(l.MaxConnectionIdle); !now.Before(due) {
					c.goAway(goAwayIdle)
				} else {
					next = earliest(next, due)
				}
			} else {
				// Busy: look again one idle period from now. A connection
				// that goes idle before then is idle for less than the
				// period at that look, which then waits for its own due
				// time: never late, and no wake-up when a call ends.
				next = earliest(next, now.Add(l.MaxConnectionIdle))
			}
		}
		if !ageAt.IsZero() {
			if graceAt.IsZero() && !now.Before(ageAt) {
				c.goAway(goAwayMaxAge)
				if l.MaxConnectionAgeGrace != infinity {
					graceAt = now.Add(l.MaxConnectionAgeGrace)
				}
			}
			if !graceAt.IsZero() {
				if !now.Before(graceAt) {
					c.endCallsLeft(detailsMaxConnectionAge)
					c.close(errors.New("max connection age grace passed"))
					return
				}
				next = earliest(next, graceAt)
			} else if now.Before(ageAt) {
				next = earliest(next, ageAt)
			}
		}
		tick.Reset(max(time.Until(next), time.Millisecond))
		select {
		case <-tick.C:
		case <-c.kick:
			if !tick.Stop() {
				select {
				case <-tick.C:
				default:
				}
			}
		}
	}
}

// errTooManyPings ends a connection whose client pinged past its strikes
// (pingPolicy), once the GOAWAY saying so is queued.
var errTooManyPings = errors.New("too many pings from the client")

// endCallsLeft ends the calls still open on a connection about to close as
// grpcio's server ends them: UNAVAILABLE with details ("max connection
// age" when max_connection_age's grace has passed, "Socket closed" when
// the client shut its side), after the messages sent before, so that a
// client keeps what it received (closed under them, a grpcio client drops
// its unread messages with the transport error). It waits, up to
// stopFlush, for the streams to end before the connection closes (the
// calls not handed to the front have ended: endUnhanded).
func (c *h2Conn) endCallsLeft(details string) {
	if c.cs == nil {
		return // not a connection of our listeners: its calls aren't told apart
	}
	c.mu.Lock()
	open := len(c.streams) - len(c.peerRST)
	c.mu.Unlock()
	if open <= 0 {
		return
	}
	c.srv.h.calls.cancelConn(c.cs, details)
	deadline := time.Now().Add(stopFlush)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		open := len(c.streams) - len(c.peerRST)
		c.mu.Unlock()
		if open <= 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
