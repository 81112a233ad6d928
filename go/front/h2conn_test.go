package front

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
)

// rawH2 dials f as an HTTP/2 client with no SETTINGS of its own and reads
// every frame the server sends, as readFrames formats them ("<stream id>
// <frame>"), on the channel it returns.
func rawH2(t *testing.T, f *Front) (net.Conn, <-chan string) {
	t.Helper()
	conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(f.Port())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write(append([]byte(clientPreface), frame(fSettings, 0, 0, nil)...)); err != nil {
		t.Fatal(err)
	}
	frames := make(chan string, 64)
	go readFrames(conn, frames)
	return conn, frames
}

// nextFrame returns the next frame that starts with prefix (stream id and
// frame name), or "" if none came within wait.
func nextFrame(frames <-chan string, prefix string, wait time.Duration) string {
	timeout := time.After(wait)
	for {
		select {
		case line, ok := <-frames:
			if !ok {
				return ""
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout:
			return ""
		}
	}
}

// TestIdleConnectionClosedAfterItsLastCall: with max_connection_idle, a
// connection still busy when its first idle period runs out gets its
// GOAWAY one period after its last call ends, not before that call ends
// and not never. The timer goroutine isn't woken when a call ends (that
// cost every call a wake-up): it looks again one period after finding the
// connection busy, so this is the case that breaks if that look is lost.
func TestIdleConnectionClosedAfterItsLastCall(t *testing.T) {
	const idle = 300 * time.Millisecond
	const hold = 450 * time.Millisecond // past the first idle period
	f, _ := startFront(t, `, "options": [["grpc.pygrpc_native.transport", "h2"], ["grpc.max_connection_idle_ms", 300]]`,
		func(f *Front, e Event) {
			if e.Kind == EventCall {
				time.AfterFunc(hold, func() { f.Calls().Respond(e.CallID, msg("late"), SendNoWait) })
			}
		})
	conn, frames := rawH2(t, f)
	write(frame(fHeaders, flagEndHeaders, 1, blockWith()), frame(fData, flagEndStream, 1, grpcMessage("x")))(conn)
	var answered time.Time
	deadline := time.After(3 * time.Second)
	for {
		select {
		case line, ok := <-frames:
			if !ok {
				t.Fatal("the connection closed without a GOAWAY")
			}
			if strings.HasPrefix(line, "1 HEADERS") && strings.HasSuffix(line, "END_STREAM") {
				answered = time.Now()
			}
			if !strings.Contains(line, "GOAWAY") {
				continue
			}
			if answered.IsZero() {
				t.Fatalf("GOAWAY (%q) while the call was still running", line)
			}
			if after := time.Since(answered); after < idle-50*time.Millisecond || after > idle+time.Second {
				t.Fatalf("GOAWAY %v after the last call ended, want about %v", after, idle)
			}
			return
		case <-deadline:
			t.Fatalf("no GOAWAY within 3 s (answered: %v)", !answered.IsZero())
		}
	}
}

// TestResetStreamFreesItsPlaceAtOnce: with grpc.max_concurrent_streams 1,
// a call the client reset no longer counts toward the limit while its
// handler still holds it (RFC 9113 5.1.2), so the client's next call is
// served, not refused: clients that cancel calls open others as soon as
// they send the reset, often in the same write (each round here sends the
// reset and the next call as one write, so that the reader takes the call
// before anything has let go of the reset one).
func TestResetStreamFreesItsPlaceAtOnce(t *testing.T) {
	calls := make(chan Event, 64)
	f, _ := startFront(t, `, "options": [["grpc.pygrpc_native.transport", "h2"], ["grpc.max_concurrent_streams", 1]]`,
		func(f *Front, e Event) {
			if e.Kind == EventCall {
				calls <- e // held: never answered
			}
		})
	conn, frames := rawH2(t, f)
	write(unaryCall(1, sayPath, "first"))(conn)
	select {
	case <-calls:
	case <-time.After(5 * time.Second):
		t.Fatal("the first call never reached the front")
	}
	for id := uint32(1); id < 40; id += 2 {
		next := fmt.Sprintf("call %d", id+2)
		b := append(frame(fRST, 0, id, u32(uint32(http2.ErrCodeCancel))), unaryCall(id+2, sayPath, next)...)
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
		select {
		case e := <-calls:
			if got := string(e.Payload.Materialize()); got != next {
				t.Fatalf("the front got %q, want %q", got, next)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s, sent with the reset of stream %d, was not served (%q)", next, id, nextFrame(frames, "", time.Second))
		}
	}
}

// TestStreamsResetButHeldAreBounded: streams reset on the wire leave the
// count of max_concurrent_streams, but a connection holds at most the limit
// of them (or resetHeadroom, where the limit is smaller) while the front
// has not let go of them: a client resetting streams as fast as it opens
// them (rapid reset) is refused there.
func TestStreamsResetButHeldAreBounded(t *testing.T) {
	for _, limit := range []int{2, resetHeadroom + 50} {
		c := &h2Conn{
			srv:     &h2Server{limits: &Limits{MaxConcurrentStreams: uint32(limit)}},
			streams: map[uint32]*h2Stream{},
			peerRST: map[uint32]bool{},
		}
		id := uint32(1)
		open := func(reset bool) {
			c.streams[id] = &h2Stream{}
			if reset {
				c.peerRST[id] = true
			}
			id += 2
		}
		for i := 0; i < limit-1; i++ {
			open(false)
		}
		if c.tooManyStreamsLocked() {
			t.Fatalf("limit %d: %d open streams refused the next", limit, limit-1)
		}
		open(false)
		if !c.tooManyStreamsLocked() {
			t.Fatalf("limit %d: a stream over the limit taken", limit)
		}
		delete(c.streams, id-2) // the last one ends
		bound := max(limit, resetHeadroom)
		for i := 0; i < bound-1; i++ {
			open(true)
		}
		if c.tooManyStreamsLocked() {
			t.Fatalf("limit %d: %d reset streams held refused a stream under the limit", limit, bound-1)
		}
		open(true)
		if !c.tooManyStreamsLocked() {
			t.Fatalf("limit %d: a stream taken with %d reset streams held: reset streams are not bounded", limit, bound)
		}
	}
}

// TestPingAckTakenAlongStopsItsTimer: a PING ack that leaves with an
// answer leaves no timer behind to fire for nothing (each firing wakes a
// thread and starts a goroutine; grpcio's and grpc-go's clients ping once
// per round trip while data flows).
func TestPingAckTakenAlongStopsItsTimer(t *testing.T) {
	saved := ackDelay
	t.Cleanup(func() { ackDelay = saved })
	ackDelay = 20 * time.Millisecond
	f := startBenchFront(t, TransportH2)
	c := dialRaw(t, f.Port())
	for i := 0; i < 20; i++ {
		c.call(t)
	}
	time.Sleep(3 * ackDelay)
	const calls = 20
	before := goroutinesCreated()
	for i := 0; i < calls; i++ {
		_ = c.fr.WritePing(false, [8]byte{byte(i)})
		c.call(t) // the PING and the call in one write: the answer takes the ack
		time.Sleep(2 * ackDelay)
	}
	if started := goroutinesCreated() - before; started > calls/4 {
		t.Fatalf("%d goroutines started for %d calls whose answers took a PING ack along; want none (the ack's timer left armed?)", started, calls)
	}
}

// TestPingAckWaitsForTheNextWrite: a PING's ack waits up to ackDelay for
// the connection's next write and leaves with it (a call's answer), or,
// where none comes, when ackDelay runs out: never later. (Clients ping
// once per round trip; bidi ping-pong then pays no write for the ack.)
// ackDelay is stretched so that the two ways are told apart.
func TestPingAckWaitsForTheNextWrite(t *testing.T) {
	saved := ackDelay
	t.Cleanup(func() { ackDelay = saved })
	ackDelay = time.Second // well apart from hold, for a loaded machine
	const hold = 150 * time.Millisecond
	f, _ := startFront(t, `, "options": [["grpc.pygrpc_native.transport", "h2"]]`, func(f *Front, e Event) {
		if e.Kind == EventCall {
			time.AfterFunc(hold, func() { f.Calls().Respond(e.CallID, msg("x"), SendNoWait) })
		}
	})
	conn, frames := rawH2(t, f)

	sent := time.Now()
	write(frame(fPing, 0, 0, []byte("idle....")))(conn)
	if nextFrame(frames, "0 PING ACK", 2*time.Second) == "" {
		t.Fatal("no ack for a PING on a connection with nothing else to write")
	}
	if waited := time.Since(sent); waited < ackDelay-50*time.Millisecond {
		t.Fatalf("with nothing else to write the ack came after %v, not after ackDelay (%v)", waited, ackDelay)
	}

	write(frame(fHeaders, flagEndHeaders, 1, blockWith()), frame(fData, flagEndStream, 1, grpcMessage("x")))(conn)
	time.Sleep(20 * time.Millisecond)
	sent = time.Now()
	write(frame(fPing, 0, 0, []byte("busy....")))(conn)
	if nextFrame(frames, "0 PING ACK", 2*time.Second) == "" {
		t.Fatal("no ack for a PING sent while a call was open")
	}
	if waited := time.Since(sent); waited < hold-100*time.Millisecond || waited > ackDelay-100*time.Millisecond {
		t.Fatalf("the ack of a PING sent while a call was open came after %v, not with the answer (%v)", waited, hold)
	}
}

// TestPeerThatDoesNotReadBoundsTheBacklog: a client that grants the
// largest windows and then reads nothing, with several server streams
// sending 1 MiB messages from senders that must never wait (Python's
// threads: SendNoWait, then WaitRoom). The connection holds at most
// about maxPending for it (the h2 transport grew its write buffer without
// bound: 4 GiB in 12 s), no send waits, and another connection is served;
// over TLS too, where the socket's backlog lies under the TLS connection.
// A send that waited here was a Python thread waiting with the GIL held,
// which froze the whole process.
func TestPeerThatDoesNotReadBoundsTheBacklog(t *testing.T) {
	t.Run("plaintext", func(t *testing.T) { testPeerThatDoesNotRead(t, nil) })
	t.Run("tls", func(t *testing.T) { testPeerThatDoesNotRead(t, newTestPKI(t)) })
}

func testPeerThatDoesNotRead(t *testing.T, pki *testPKI) {
	const streams = 3
	msg := make([]byte, 1<<20)
	var longest atomic.Int64 // the longest Send, in ns
	doc := fmt.Sprintf(`{"address": "127.0.0.1:0", "methods": [[%q, false], [%q, true]], "options": [["grpc.pygrpc_native.transport", "h2"]]`, sayPath, countPath)
	if pki != nil {
		doc += `, "tls": ` + tlsDoc(pki.server.key, pki.server.cert, nil, false)
	}
	f := startConfigured(t, doc+"}")
	serveEvents(t, f, func(f *Front, e Event) {
		if e.Kind != EventCall {
			return
		}
		if e.MethodID == 0 {
			f.Calls().Respond(e.CallID, mem.BufferSlice{mem.SliceBuffer([]byte("ok"))}, SendWait)
			return
		}
		go func() {
			for {
				start := time.Now()
				r := f.Calls().Send(e.CallID, mem.BufferSlice{mem.SliceBuffer(msg)}, SendNoWait)
				if took := int64(time.Since(start)); took > longest.Load() {
					longest.Store(took)
				}
				switch r {
				case ResultOK:
				case ResultWouldBlock:
					if f.Calls().WaitRoom(e.CallID) != ResultOK {
						return
					}
				default:
					return
				}
			}
		}()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(f.Port()))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	creds := insecure.NewCredentials()
	if pki != nil {
		cfg := clientTLS(pki, nil)
		cfg.NextProtos = []string{"h2"}
		tc := tls.Client(conn, cfg)
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		conn, creds = tc, credentials.NewTLS(clientTLS(pki, nil))
	}
	b := append([]byte(clientPreface), frame(fSettings, 0, 0, setting(0x4, 1<<31-1))...)
	b = append(b, frame(fWindow, 0, 0, u32(1<<31-1-65535))...)
	for i := uint32(0); i < streams; i++ {
		b = append(b, unaryCall(1+2*i, countPath, "go")...)
	}
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the senders fill what the connection takes
	var backlog int
	h2 := f.srv.(*h2Server)
	h2.mu.Lock()
	for c := range h2.conns {
		c.w.mu.Lock()
		backlog = max(backlog, c.w.backlogLocked())
		c.w.mu.Unlock()
	}
	h2.mu.Unlock()
	if backlog > maxPending+1<<20 {
		t.Errorf("the connection holds %d bytes for a peer that doesn't read, want at most about %d", backlog, maxPending)
	}
	if d := time.Duration(longest.Load()); d > 500*time.Millisecond {
		t.Errorf("a send that must not wait took %v", d)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(clientCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	in, out := []byte("hi"), []byte(nil)
	if err := cc.Invoke(ctx, sayPath, &in, &out); err != nil {
		t.Errorf("another connection's call: %v", err)
	}
}

// TestPeerThatPingsAndDoesNotReadIsNotRead: a client that sends PINGs
// and never reads their acks makes the connection's reader stop reading
// once it is owed maxOwedReplies beyond what the kernel holds, so the acks
// can't pile up (the client's own writes then stall instead): the
// connection holds well under 1 MiB for it, as grpc-go's transport does,
// not the backlog's bound (maxReadBacklog, 32 MiB, before the count).
func TestPeerThatPingsAndDoesNotReadIsNotRead(t *testing.T) {
	f, _ := startFront(t, `, "options": [["grpc.pygrpc_native.transport", "h2"]]`, func(*Front, Event) {})
	conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(f.Port())))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(append([]byte(clientPreface), frame(fSettings, 0, 0, nil)...)); err != nil {
		t.Fatal(err)
	}
	ping := frame(fPing, 0, 0, make([]byte, 8))
	chunk := bytes.Repeat(ping, 4096)
	want := 3 * maxReadBacklog / len(ping) // pings whose acks are three times the brake's
	conn.SetWriteDeadline(time.Now().Add(3 * time.Second))
	sent := 0
	for sent < want {
		if _, err := conn.Write(chunk); err != nil {
			break // the server stopped reading: what the test wants
		}
		sent += 4096
	}
	time.Sleep(200 * time.Millisecond) // the reader acts on what it read
	h2 := f.srv.(*h2Server)
	h2.mu.Lock()
	defer h2.mu.Unlock()
	for c := range h2.conns {
		c.w.mu.Lock()
		backlog := c.w.backlogLocked()
		c.w.mu.Unlock()
		if backlog > 1<<20 {
			t.Errorf("%d bytes of acks wait for a client that doesn't read (%d pings sent), want under 1 MiB", backlog, sent)
		}
	}
}

// TestACallAwaitingItsRequestHoldsItsPlace: under maximum_concurrent_rpcs,
// a unary call to a known method counts from its HEADERS, as grpcio counts
// it, not from its request: while one waits for its request, the next call
// is refused; once it ends without one (here the client resets it), its
// place comes back.
func TestACallAwaitingItsRequestHoldsItsPlace(t *testing.T) {
	f, cc := startFront(t, `, "maximum_concurrent_rpcs": 1, "options": [["grpc.pygrpc_native.transport", "h2"]]`, echo)
	conn, _ := rawH2(t, f)
	write(frame(fHeaders, flagEndHeaders, 1, blockWith()))(conn)
	_, err := say(context.Background(), cc, "second")
	wantStatus(t, err, codes.ResourceExhausted, detailsConcurrencyLimit)
	write(frame(fRST, 0, 1, u32(uint32(http2.ErrCodeCancel))))(conn)
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err = say(context.Background(), cc, "third"); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reset call's place never came back: %v", err)
		}
	}
}

// TestSettingsLeftUnacknowledgedEndTheConnection: as grpc-core's settings
// watchdog, a client that doesn't acknowledge the server's SETTINGS within
// grpc.http2.settings_timeout is told GOAWAY SETTINGS_TIMEOUT and cut off,
// whether it sent its preface (and SETTINGS) or nothing at all; one that
// acknowledges them stays.
func TestSettingsLeftUnacknowledgedEndTheConnection(t *testing.T) {
	f, _ := startFront(t, `, "options": [["grpc.pygrpc_native.transport", "h2"], ["grpc.http2.settings_timeout", 300]]`,
		func(f *Front, e Event) {})
	expectCut := func(t *testing.T, frames <-chan string) {
		t.Helper()
		start := time.Now()
		line := nextFrame(frames, "0 GOAWAY", 3*time.Second)
		if !strings.Contains(line, "SETTINGS_TIMEOUT") {
			t.Fatalf("got %q, want a GOAWAY SETTINGS_TIMEOUT", line)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("GOAWAY after %v, want about 300 ms", took)
		}
		for range frames { // closed by the server
		}
	}
	t.Run("preface sent", func(t *testing.T) {
		_, frames := rawH2(t, f)
		expectCut(t, frames)
	})
	t.Run("nothing sent", func(t *testing.T) {
		conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(f.Port())))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		frames := make(chan string, 64)
		go readFrames(conn, frames)
		expectCut(t, frames)
	})
	t.Run("acknowledged", func(t *testing.T) {
		conn, frames := rawH2(t, f)
		write(frame(fSettings, flagAck, 0, nil))(conn)
		if line := nextFrame(frames, "0 GOAWAY", 900*time.Millisecond); line != "" {
			t.Fatalf("got %q on a connection whose client acknowledged the SETTINGS", line)
		}
	})
}
