package front

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// The request side of an h2Stream: what the reader hands over (messages,
// the half-close, a refusal, the end on the wire) and how it reaches the
// front (Request for a unary request; the RequestSink under credit for a
// request stream). Everything here is under the stream's rmu.

// queuedMessage is a request message waiting to be handed over, and its
// size on the wire (compressed, with its gRPC message header).
type queuedMessage struct {
	m    mem.BufferSlice
	wire int
}

// messageTally counts messages and their wire bytes, for the stream's
// stats (CallStats.Messages at its end: see h2Conn.endStream). taken is
// under rmu.
type messageTally struct{ count, wire int }

// sentTally is the messages sent: added to by whichever goroutine sends,
// read at the stream's end.
type sentTally struct{ count, wire atomic.Int64 }

func (t *sentTally) add(wire int) {
	t.count.Add(1)
	t.wire.Add(int64(wire))
}

// message queues one complete request message of wire bytes.
func (s *h2Stream) message(m mem.BufferSlice, wire int) {
	s.rmu.Lock()
	if s.msgs == nil {
		s.msgs = s.msgsBuf[:0]
	}
	s.msgs = append(s.msgs, queuedMessage{m, wire})
	s.requestArrivedLocked()
	s.rmu.Unlock()
}

// popMsgLocked takes the oldest queued message (msgs is not empty; rmu
// held) and counts it as taken. Its slot is cleared, and once none is left
// msgs starts over at msgsBuf.
func (s *h2Stream) popMsgLocked() mem.BufferSlice {
	q := s.msgs[0]
	s.msgs[0] = queuedMessage{}
	s.msgs = s.msgs[1:]
	if len(s.msgs) == 0 {
		s.msgs = s.msgsBuf[:0]
	}
	s.taken.count++
	s.taken.wire += q.wire
	return q.m
}

// reportMessages tells the stats the messages sent and taken so far, at
// the stream's end (the one report: CallStats.Messages comes before End).
func (s *h2Stream) reportMessages(cs CallStats) {
	s.rmu.Lock()
	taken := s.taken
	s.rmu.Unlock()
	if taken.count > 0 {
		cs.Messages(s.stats, false, taken.count, taken.wire)
	}
	if n := s.sent.count.Load(); n > 0 {
		cs.Messages(s.stats, true, int(n), int(s.sent.wire.Load()))
	}
}

// refuse records the status of a request message the transport refused
// (over the size limit, undecodable); the call ends with it.
func (s *h2Stream) refuse(err error) {
	s.rmu.Lock()
	if s.recvErr == nil {
		s.recvErr = err
	}
	s.requestArrivedLocked()
	s.rmu.Unlock()
}

// halfClose records the end of the client's stream.
func (s *h2Stream) halfClose() {
	s.rmu.Lock()
	s.recvEnd = true
	s.requestArrivedLocked()
	s.rmu.Unlock()
}

func (s *h2Stream) requestArrivedLocked() {
	if !s.requestInClosed {
		s.requestInClosed = true
		if s.requestIn != nil {
			close(s.requestIn)
		}
	}
}

func (s *h2Stream) recvErrLocked() error {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return s.recvErr
}

// requestReady: a unary call has what Request returns.
func (s *h2Stream) requestReady() bool {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return s.requestInClosed
}

// cut records that the call ended on the wire; a started sink is told.
func (s *h2Stream) cut() {
	s.rmu.Lock()
	s.cutOff = true
	s.rmu.Unlock()
	s.kickDelivery()
}

// kickDelivery hands what the credit lets through to the sink, on the
// calling goroutine (the reader), unless a delivery is under way.
func (s *h2Stream) kickDelivery() {
	s.rmu.Lock()
	start := s.sink != nil && !s.delivering && s.deliverable()
	if start {
		s.delivering = true
	}
	s.rmu.Unlock()
	if start {
		s.deliver()
	}
}

// decompress decodes a compressed request message, refusing one larger
// than limit once decoded.
func decompress(name string, b []byte, limit int) (mem.BufferSlice, error) {
	comp := encoding.GetCompressor(name)
	if comp == nil {
		return nil, status.Errorf(codes.Unimplemented, "grpc: Decompressor is not installed for grpc-encoding %q", name)
	}
	if len(b) == 0 {
		// Nothing compressed is an empty message, as grpcio reads it.
		return mem.BufferSlice{mem.SliceBuffer([]byte{})}, nil
	}
	r, err := comp.Decompress(bytes.NewReader(b))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "grpc: failed to decompress the received message: %v", err)
	}
	out, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "grpc: failed to decompress the received message: %v", err)
	}
	if len(out) > limit {
		return nil, status.Errorf(codes.ResourceExhausted, "grpc: received message after decompression larger than max %d", limit)
	}
	return mem.BufferSlice{mem.SliceBuffer(out)}, nil
}

// h2Workers run calls' handlers: a call goes to an idle worker, or to a new
// goroutine when none is idle. Up to streamWorkers goroutines stay for later
// calls (their grown stacks are reused; see streamWorkers); the rest end
// with their call.
type h2Workers struct {
	ch   chan *h2Stream
	n    atomic.Int32
	once sync.Once
}

func newH2Workers() *h2Workers { return &h2Workers{ch: make(chan *h2Stream)} }

func (w *h2Workers) run(s *h2Stream) {
	select {
	case w.ch <- s:
	default:
		go w.work(s)
	}
}

func (w *h2Workers) work(s *h2Stream) {
	keep := w.n.Add(1) <= streamWorkers
	if !keep {
		w.n.Add(-1)
	}
	for {
		s.serveCall()
		if !keep {
			return
		}
		var ok bool
		if s, ok = <-w.ch; !ok {
			return
		}
	}
}

// stop releases the idle workers; no call may be run after it.
func (w *h2Workers) stop() { w.once.Do(func() { close(w.ch) }) }

// serveCall runs the front's handler for the call, then ends the stream
// if the handler didn't, unless the front drives the call (errDriven): End
// does that then.
func (s *h2Stream) serveCall() {
	if s.ctx.Err() != nil {
		// Reset (or expired) while it waited to be handed over: it never
		// reaches Python, and counts as refused, as on grpc-go's transport
		// (where such a call's request can't be read).
		s.finishWith(s.c.srv.h.refuse(s.ctx, s.ctx.Err()))
		s.c.srv.handlers.Done()
		return
	}
	err := s.c.srv.h.serve(s)
	if err == errDriven {
		return
	}
	s.finishWith(err)
	s.c.srv.handlers.Done()
}

// End is the end of a driven call (inlineStream).
func (s *h2Stream) End(err error) {
	s.finishWith(err)
	s.c.srv.handlers.Done()
}

// NotifyEnd: see inlineStream, and h2Stream.endHook.
func (s *h2Stream) NotifyEnd(h wireEndHook) {
	c := s.c
	c.mu.Lock()
	now := s.released || c.closed || c.peerRST[s.id] || s.ctx.Err() != nil
	if !now {
		s.endHook = h
	}
	c.mu.Unlock()
	if now {
		h.wireEnded()
	}
}

// takeEndHookLocked takes the stream's end hook, to tell it once its
// context has ended. c.mu held.
func (s *h2Stream) takeEndHookLocked() wireEndHook {
	h := s.endHook
	s.endHook = nil
	return h
}

// tellEnd tells an end hook taken with takeEndHookLocked, if any.
func tellEnd(h wireEndHook) {
	if h != nil {
		h.wireEnded()
	}
}
