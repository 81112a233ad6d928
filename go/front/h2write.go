package front

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Writer is a connection's write side. Frames are encoded by whoever
// sends them into buf, under mu, and written to the socket by whoever finds
// nobody writing (flushLocked): a lone frame goes out at once, and frames
// queued while a write is in progress go out together in the next one. The
// socket is an h2Socket, whose writes never wait for the peer, so any
// goroutine (the reader, a Python thread) may flush.
//
// Everything below is guarded by mu. The HPACK encoder's state is the
// connection's, so header blocks are encoded under mu, in the order their
// frames enter buf.
type h2Writer struct {
	mu sync.Mutex
	nc net.Conn
	// sock is the connection's socket, under nc when nc is TLS: its
	// backlog counts in backlogLocked. Set once, at creation.
	sock *h2Socket
	// buf holds frames not yet written; spare is the buffer the last write
	// finished with, reused for the next.
	buf, spare []byte
	// flushing: a goroutine is writing (it takes buf again before it
	// stops, so frames put meanwhile are never left behind); writing is
	// the length of what it took, counted in the backlog until the socket
	// has it.
	flushing bool
	writing  int
	// err is the first write error; frames after it are dropped, and the
	// connection is closing.
	err error
	// lastWrite is when the last write began; flushReq wakes the
	// connection's flusher (made on the first burst; closed by fail).
	lastWrite   time.Time
	flushReq    chan struct{}
	flusherDone bool
	// lateFlush writes out frames queued by controlLater that nothing
	// else has written within ackDelay; lateArmed: it is running (a write
	// that takes those frames along stops it).
	lateFlush *time.Timer
	lateArmed bool

	// held: the connection is on an event loop's list of connections
	// holding its frames (heldWrites), until the loop flushes them.
	held bool

	// answers counts the answers queued since the last write began
	// (answerFlushLocked); batch is how many the last write took along.
	// Both for window.
	answers, batch int
	// settled is broadcast when a write ends or the connection fails,
	// while settling (the number of goroutines in settle) is above zero.
	settled  *sync.Cond
	settling int

	henc *hpack.Encoder
	hbuf bytes.Buffer

	// Send flow control: the peer's connection window, its stream windows'
	// initial size (SETTINGS_INITIAL_WINDOW_SIZE) and its largest frame.
	connWindow    int64
	initialWindow int64
	maxFrame      int
	// windowWait is broadcast when a window grows, a stream ends or the
	// connection closes: senders waiting for window re-check. Also, while
	// backlogWaiters is above zero, when the backlog shrinks (a write
	// ends, the socket drained a batch): senders waiting for it re-check.
	windowWait     *sync.Cond
	backlogWaiters int

	// sentSincePing: HEADERS, DATA or a WINDOW_UPDATE went into buf since
	// the client's last ping was counted (pingPolicy; cleared there).
	sentSincePing bool
	// windowOwed: grpc-core would owe the client a WINDOW_UPDATE now (it
	// sent DATA, or a call of a stream it keeps open asks for a message,
	// also once a message of the server's went out before that ask:
	// h2Stream.SendMessage).
	// The h2 transport grants its windows up front and writes none then,
	// but the ping policy counts as grpc-core does, whose next write
	// carries that update and so forgives pings: any frame that goes into
	// buf clears it and counts as sent (carryOwedLocked), except a ping's
	// ack, whose ping takes it (pingTooSoon). Set by oweWindow from any
	// goroutine; cleared under mu.
	windowOwed atomic.Bool

	// onError is called (once, without mu) with the first write error.
	onError func(error)
}

func newH2Writer(sock *h2Socket, onError func(error)) *h2Writer {
	w := &h2Writer{
		nc:            sock,
		sock:          sock,
		connWindow:    65535,
		initialWindow: 65535,
		maxFrame:      16384,
		onError:       onError,
	}
	w.henc = hpack.NewEncoder(&w.hbuf)
	w.windowWait = sync.NewCond(&w.mu)
	w.settled = sync.NewCond(&w.mu)
	return w
}

// errConnClosed is a send on a connection that has failed or closed.
var errConnClosed = errors.New("h2 transport: connection closed")

// frameHeader appends an HTTP/2 frame header.
func frameHeader(b []byte, length int, t http2.FrameType, flags http2.Flags, streamID uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), byte(t), byte(flags),
		byte(streamID>>24)&0x7f, byte(streamID>>16), byte(streamID>>8), byte(streamID))
}

// flushLocked writes buf out unless another goroutine is already doing so
// (it will write what was added). Called with mu held; returns with it held.
func (w *h2Writer) flushLocked() {
	if w.flushing || len(w.buf) == 0 {
		return
	}
	w.flushing = true
	if w.lateArmed && w.lateFlush.Stop() {
		// This write takes the held ack along: a timer left to fire would
		// wake a thread (and start a goroutine) to find nothing to write.
		w.lateArmed = false
	}
	w.lastWrite = time.Now()
	w.batch, w.answers = w.answers, 0
	for len(w.buf) > 0 && w.err == nil {
		b := w.buf
		w.buf, w.spare = w.spare[:0], nil
		if w.buf == nil {
			w.buf = getWriteBuf()
		}
		w.writing = len(b)
		w.mu.Unlock()
		var err error
		taken := false
		if t, ok := w.nc.(*h2Socket); ok {
			taken, err = t.writeTaking(b)
		} else {
			_, err = w.nc.Write(b)
		}
		w.mu.Lock()
		w.writing = 0
		switch {
		case taken: // the socket writes b later, and recycles it
		case cap(b) > maxKeptWriteBuf: // not one a burst grew: left to the GC
		case w.spare == nil:
			w.spare = b[:0]
		default:
			putWriteBuf(b)
		}
		if err != nil && w.err == nil {
			w.err = err
			w.buf = nil
			w.windowWait.Broadcast()
			if w.onError != nil {
				onError := w.onError
				w.mu.Unlock()
				onError(err)
				w.mu.Lock()
			}
		}
	}
	w.flushing = false
	if w.settling > 0 {
		w.settled.Broadcast()
	}
	if w.backlogWaiters > 0 {
		w.windowWait.Broadcast()
	}
}

// backlogLocked is what the connection holds for the peer: frames not
// yet written or being written, and what its socket took but the kernel
// didn't (over TLS, as records, so a little more than the frames). mu
// held.
func (w *h2Writer) backlogLocked() int {
	return len(w.buf) + w.writing + int(w.sock.backlog.Load())
}

// backlogFullLocked reports that a message of n bytes would take the
// backlog past maxPending. One always goes into an empty backlog, however
// large. mu held.
func (w *h2Writer) backlogFullLocked(n int) bool {
	b := w.backlogLocked()
	return b > 0 && b+n > maxPending
}

// socketDrained is the socket's onDrained: senders waiting for the
// backlog to shrink re-check.
func (w *h2Writer) socketDrained() {
	w.mu.Lock()
	if w.backlogWaiters > 0 {
		w.windowWait.Broadcast()
	}
	w.mu.Unlock()
}

// Write buffers: while one is being written, senders append to another,
// so a connection under load alternates between two or more; those beyond
// its spare go back to writeBufs, not to the GC, so that appending large
// messages doesn't grow a fresh buffer (copying as it doubles) each time.
var writeBufs sync.Pool // *[]byte, capacity at most maxKeptWriteBuf

const maxKeptWriteBuf = 4 << 20

func getWriteBuf() []byte {
	if p, ok := writeBufs.Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return nil
}

func putWriteBuf(b []byte) {
	b = b[:0]
	writeBufs.Put(&b)
}

// control queues a small frame (SETTINGS ack, PING ack, WINDOW_UPDATE,
// RST_STREAM, GOAWAY) and writes it out. The socket never waits for the
// peer (h2Socket), so the reader may do this itself.
// windowUpdate sends a WINDOW_UPDATE at once.
func (w *h2Writer) windowUpdate(streamID, incr uint32) {
	w.control(func(b []byte) []byte {
		w.sentLocked()
		return appendWindowUpdate(b, streamID, incr)
	})
}

func (w *h2Writer) control(f func(b []byte) []byte) {
	w.mu.Lock()
	if w.err == nil {
		w.buf = f(w.buf)
		w.carryOwedLocked()
		w.flushLocked()
	}
	w.mu.Unlock()
}

// oweWindow: see windowOwed. Any goroutine; a load when already owed.
func (w *h2Writer) oweWindow() {
	if !w.windowOwed.Load() {
		w.windowOwed.Store(true)
	}
}

// sentLocked: HEADERS, DATA or a WINDOW_UPDATE went into buf, with the
// window update owed, if any. mu held.
func (w *h2Writer) sentLocked() {
	w.sentSincePing = true
	if w.windowOwed.Load() {
		w.windowOwed.Store(false)
	}
}

// carryOwedLocked: a frame went into buf, carrying the window update owed,
// if any (windowOwed). mu held.
func (w *h2Writer) carryOwedLocked() {
	if w.windowOwed.Load() && w.windowOwed.Swap(false) {
		w.sentSincePing = true
	}
}

// ackDelay is how long a PING ack may wait in buf for a write that takes it
// along (controlLater).
var ackDelay = time.Millisecond // a var only so that tests can stretch it

// controlLater queues a control frame that may wait up to ackDelay for the
// connection's next write (an answer, another control frame): a PING ack.
// A client that pings as it receives data (grpc-go's BDP estimator does,
// once per round trip; grpcio's too) otherwise costs a write of its own,
// and the client a read, for every message it gets; its ack then goes out
// with the next answer instead. (Acking at once where no call is open was
// measured, 2026-12-03: the timer's wake-ups saved were paid back in
// writes, 1.9 -> 2.3 per call for the low-level API paced at 4,000
// calls/s, with no less CPU.)
func (w *h2Writer) controlLater(f func(b []byte) []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return
	}
	w.buf = f(w.buf)
	w.carryOwedLocked()
	if w.flushing || w.lateArmed {
		return // the writer in progress, or the armed timer, takes it
	}
	w.lateArmed = true
	if w.lateFlush == nil {
		w.lateFlush = time.AfterFunc(ackDelay, w.flushLate)
	} else {
		w.lateFlush.Reset(ackDelay)
	}
}

// flushLate is the lateFlush timer: it writes out what waits.
func (w *h2Writer) flushLate() {
	w.mu.Lock()
	w.lateArmed = false
	w.flushLocked()
	w.mu.Unlock()
}

func appendSettingsAck(b []byte) []byte {
	return frameHeader(b, 0, http2.FrameSettings, http2.FlagSettingsAck, 0)
}

func appendSettings(b []byte, settings ...http2.Setting) []byte {
	b = frameHeader(b, 6*len(settings), http2.FrameSettings, 0, 0)
	for _, s := range settings {
		b = binary.BigEndian.AppendUint16(b, uint16(s.ID))
		b = binary.BigEndian.AppendUint32(b, s.Val)
	}
	return b
}

func appendPing(b []byte, ack bool, data [8]byte) []byte {
	var flags http2.Flags
	if ack {
		flags = http2.FlagPingAck
	}
	b = frameHeader(b, 8, http2.FramePing, flags, 0)
	return append(b, data[:]...)
}

func appendWindowUpdate(b []byte, streamID uint32, incr uint32) []byte {
	b = frameHeader(b, 4, http2.FrameWindowUpdate, 0, streamID)
	return binary.BigEndian.AppendUint32(b, incr&0x7fffffff)
}

func appendRSTStream(b []byte, streamID uint32, code http2.ErrCode) []byte {
	b = frameHeader(b, 4, http2.FrameRSTStream, 0, streamID)
	return binary.BigEndian.AppendUint32(b, uint32(code))
}

func appendGoAway(b []byte, lastStreamID uint32, code http2.ErrCode, debug string) []byte {
	b = frameHeader(b, 8+len(debug), http2.FrameGoAway, 0, 0)
	b = binary.BigEndian.AppendUint32(b, lastStreamID&0x7fffffff)
	b = binary.BigEndian.AppendUint32(b, uint32(code))
	return append(b, debug...)
}

// headerField is one field of a header block to encode.
type headerField struct{ name, value string }

// appendHeadersLocked encodes fields as one header block (HEADERS, then
// CONTINUATION frames past the peer's frame size) for streamID. mu held.
func (w *h2Writer) appendHeadersLocked(streamID uint32, endStream bool, fields []headerField) {
	w.sentLocked()
	w.hbuf.Reset()
	for _, f := range fields {
		_ = w.henc.WriteField(hpack.HeaderField{Name: f.name, Value: f.value})
	}
	block := w.hbuf.Bytes()
	first := true
	for {
		n := min(len(block), w.maxFrame)
		var flags http2.Flags
		if n == len(block) {
			flags |= http2.FlagHeadersEndHeaders // same bit as CONTINUATION's
		}
		t := http2.FrameContinuation
		if first {
			t = http2.FrameHeaders
			if endStream {
				flags |= http2.FlagHeadersEndStream
			}
		}
		w.buf = frameHeader(w.buf, n, t, flags, streamID)
		w.buf = append(w.buf, block[:n]...)
		block = block[n:]
		first = false
		if len(block) == 0 {
			return
		}
	}
}

// sendMessage writes one gRPC message (its 5-byte prefix, then parts) as
// DATA frames on s, within the peer's windows: it waits for window updates
// while either window is empty, and for the backlog to shrink while it is
// over maxPending, until s or the connection ends. Without mayWait it
// never waits: a message the windows and the backlog can't take whole now
// is refused (errSendWouldWait). The caller is s's owner.
func (w *h2Writer) sendMessage(s *h2Stream, prefix [5]byte, parts [][]byte, mayWait bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	pending := prefix[:]
	pi := 0
	left := 5
	for _, p := range parts {
		left += len(p)
	}
	if !mayWait && w.err == nil && s.ctx.Err() == nil &&
		(int64(left) > min(w.connWindow, s.sendWindow) || w.backlogFullLocked(left)) {
		// The whole message can't go now: send none of it (the driver
		// hands it to a goroutine that may wait). Past this point it
		// goes out without a wait, mu held throughout.
		return errSendWouldWait
	}
	// Room for the whole message at once (frame headers included), so a
	// large one doesn't grow buf by doubling, copying what it holds.
	w.buf = slices.Grow(w.buf, left+9*(left/w.maxFrame+1))
	for left > 0 {
		if w.err != nil {
			return errConnClosed
		}
		if s.ctx.Err() != nil {
			return s.ctx.Err()
		}
		if mayWait && w.backlogLocked() > maxPending {
			// A peer that grants windows and doesn't read: the backlog,
			// not its windows, holds this sender (a goroutine that may
			// wait; one that may not was let through whole above).
			w.flushLocked()
			w.waitLocked(s)
			continue
		}
		avail := min(int64(left), w.connWindow, s.sendWindow, int64(w.maxFrame))
		if avail <= 0 {
			// Let the peer see what is queued before waiting for it.
			w.flushLocked()
			w.watchEndLocked(s)
			if w.err == nil && s.ctx.Err() == nil && min(w.connWindow, s.sendWindow) <= 0 {
				w.windowWait.Wait()
			}
			continue
		}
		n := int(avail)
		w.connWindow -= avail
		s.sendWindow -= avail
		left -= n
		w.buf = frameHeader(w.buf, n, http2.FrameData, 0, s.id)
		w.sentLocked()
		for n > 0 {
			if len(pending) == 0 {
				pending = parts[pi]
				pi++
				continue
			}
			k := min(n, len(pending))
			w.buf = append(w.buf, pending[:k]...)
			pending = pending[k:]
			n -= k
		}
	}
	return nil
}

// watchEndLocked has the end of s wake the senders waiting on windowWait,
// once per stream. mu held.
func (w *h2Writer) watchEndLocked(s *h2Stream) {
	if !s.wakeOnEnd {
		s.wakeOnEnd = true
		context.AfterFunc(s.ctx, w.wake)
	}
}

// waitLocked waits, for s, until the backlog is back under maxPending, or
// s or the connection ends. mu held.
func (w *h2Writer) waitLocked(s *h2Stream) {
	w.watchEndLocked(s)
	w.backlogWaiters++
	for w.err == nil && s.ctx.Err() == nil && w.backlogLocked() > maxPending {
		w.windowWait.Wait()
	}
	w.backlogWaiters--
}

// queueHeaders queues a header block, and the frames after appends, if
// any; they go out with the next flush.
func (w *h2Writer) queueHeaders(streamID uint32, endStream bool, fields []headerField, after func(b []byte) []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return errConnClosed
	}
	w.appendHeadersLocked(streamID, endStream, fields)
	if after != nil {
		w.buf = after(w.buf)
	}
	return nil
}

// settle writes out what is queued and waits until no write of the
// writer's is in progress (the flusher's included), the connection fails,
// or timeout passes: a connection closing on purpose first sends what its
// calls queued.
func (w *h2Writer) settle(timeout time.Duration) {
	expired := false
	t := time.AfterFunc(timeout, func() {
		w.mu.Lock()
		expired = true
		w.settled.Broadcast()
		w.mu.Unlock()
	})
	defer t.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.settling++
	for w.err == nil && !expired && (w.flushing || len(w.buf) > 0) {
		if !w.flushing {
			w.flushLocked()
			continue
		}
		w.settled.Wait()
	}
	w.settling--
}

// flushNow writes out what is queued, at once (unless another goroutine
// is writing: it will).
func (w *h2Writer) flushNow() {
	w.mu.Lock()
	if w.err == nil {
		w.flushLocked()
	}
	w.mu.Unlock()
}

// flush has what is queued written out as by says (answerFlushLocked).
func (w *h2Writer) flush(by writeBy) {
	w.mu.Lock()
	w.answerFlushLocked(by)
	w.mu.Unlock()
}

// flushHeld writes out the frames an event loop held (heldFlusher).
func (w *h2Writer) flushHeld() {
	w.mu.Lock()
	w.held = false
	if w.err == nil {
		w.flushLocked()
	}
	w.mu.Unlock()
}

// coalesceWindow is the least time between two writes of answers while a
// connection is busy: an answer that comes sooner after the last write is
// left to the connection's flusher goroutine, so that the answers of a
// burst go out in one write, while a lone answer is written at once by its
// sender. The window is coalesceWindow per answer the last write carried,
// up to coalesceBatch of them: where answers come one at a time (a
// ping-pong stream, a paced load of unary calls) it stays at 30 µs, so a
// reply waits at most that long; where each write carries several (many
// streams of messages: aio.server() streams of 100 messages cost 12
// writes at 30 µs, 6 at up to 240 µs), it grows, and shrinks back as soon
// as a write carries one. Counting the streams open instead delayed
// ping-pong streams on a connection with many open and idle ones (server()
// bidi: 40% more CPU per stream).
const (
	coalesceWindow = 30 * time.Microsecond
	coalesceBatch  = 8
)

// window is the current least time between writes. mu held.
func (w *h2Writer) window() time.Duration {
	return coalesceWindow * time.Duration(min(max(w.batch, 1), coalesceBatch))
}

// answerFlushLocked writes out queued answers (see coalesceWindow); by
// an event loop's sends, either leaves them to the loop's next flush
// (by.held: SendHeld) or to the flusher whatever the window (by.flusher):
// the loop's time is worth more than the flusher's wake-up (aio.server()
// on 2 cores: ~12% less CPU per empty call, a third less per stream of
// 100 ping-pongs). A thread's lone answer is cheaper written by the
// thread (no wake-up). mu held.
func (w *h2Writer) answerFlushLocked(by writeBy) {
	if w.err != nil {
		return
	}
	w.answers++
	if w.flushing || len(w.buf) == 0 {
		return
	}
	if by.held != nil {
		if !w.held {
			w.held = true
			by.held.add(w)
		}
		return
	}
	if by.flusher || time.Since(w.lastWrite) < w.window() {
		w.flushing = true // the flusher's now; senders meanwhile only append
		if w.flushReq == nil {
			w.flushReq = make(chan struct{}, 1)
			go w.flusher()
		}
		signal(w.flushReq)
		return
	}
	w.flushLocked()
}

// flusher is the connection's goroutine that writes bursts of answers
// (answerFlushLocked); it ends with the connection.
func (w *h2Writer) flusher() {
	for range w.flushReq {
		w.mu.Lock()
		if d := w.window() - time.Since(w.lastWrite); d > 0 {
			// Let the burst gather: at most one write per window.
			w.mu.Unlock()
			time.Sleep(d)
			w.mu.Lock()
		}
		w.flushing = false
		w.flushLocked()
		if w.settling > 0 {
			w.settled.Broadcast() // flushLocked had nothing to write
		}
		w.mu.Unlock()
	}
}

// growConn adds a connection WINDOW_UPDATE's increment; false if the window
// would pass 2^31-1 (a connection error).
func (w *h2Writer) growConn(incr uint32) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.connWindow+int64(incr) > 1<<31-1 {
		return false
	}
	w.connWindow += int64(incr)
	w.windowWait.Broadcast()
	return true
}

// growStream adds a stream WINDOW_UPDATE's increment to s; false on
// overflow (a stream error).
func (w *h2Writer) growStream(s *h2Stream, incr uint32) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.sendWindow+int64(incr) > 1<<31-1 {
		return false
	}
	s.sendWindow += int64(incr)
	w.windowWait.Broadcast()
	return true
}

// wake re-checks every waiting sender (a stream ended, the connection is
// closing).
func (w *h2Writer) wake() {
	w.mu.Lock()
	w.windowWait.Broadcast()
	w.mu.Unlock()
}

// fail marks the connection as unwritable (it is closing).
func (w *h2Writer) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
		w.buf = nil
	}
	if w.flushReq != nil && !w.flusherDone {
		w.flusherDone = true
		close(w.flushReq)
	}
	w.windowWait.Broadcast()
	w.settled.Broadcast()
	w.mu.Unlock()
}
