package front

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// The request side of the h2 reader: DATA frames, their flow control, and
// the gRPC messages they carry.

// h2MaxReadFrame is the largest frame the reader takes: our SETTINGS keep
// HTTP/2's default SETTINGS_MAX_FRAME_SIZE, so a larger frame is a
// FRAME_SIZE_ERROR (the Framer's).
const h2MaxReadFrame = 16384

// framePayload is a DATA frame's payload as requestData consumes it: a
// slice the Framer has read, or bytes still in the connection's reader,
// read straight into the message they belong to (dataDirect). Reader only.
type framePayload struct {
	p []byte        // the Framer's copy (r == nil)
	r *bufio.Reader // or the connection's reader
	n int           // bytes left
}

// read fills dst (len(dst) <= n) with the payload's next bytes.
func (f *framePayload) read(dst []byte) error {
	f.n -= len(dst)
	if f.r == nil {
		f.p = f.p[copy(dst, f.p):]
		return nil
	}
	_, err := io.ReadFull(f.r, dst)
	return err
}

// skip drops what is left of the payload.
func (f *framePayload) skip() error {
	n := f.n
	f.n = 0
	if f.r == nil || n == 0 {
		return nil
	}
	_, err := f.r.Discard(n)
	return err
}

// dataDirect takes the next frame itself when it is a DATA frame that
// needs none of the Framer's checks (on a stream, unpadded, within
// h2MaxReadFrame): its payload goes from the connection's reader straight
// into the request message, one copy where the Framer would make two, and
// no frame value. Any other frame is left to the Framer (false). It runs
// after headersDirect, which reads header blocks whole (and takes every
// frame while a refused block's CONTINUATION frames are due), so no frame
// it takes is inside a header block: skipping the Framer here loses none
// of its checks on frame order.
func (c *h2Conn) dataDirect() (bool, error) {
	h, err := c.br.Peek(9)
	if err != nil || http2.FrameType(h[3]) != http2.FrameData || http2.Flags(h[4]).Has(http2.FlagDataPadded) {
		return false, nil // a read error is the Framer's to report
	}
	n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	id := binary.BigEndian.Uint32(h[5:]) & (1<<31 - 1)
	if n > h2MaxReadFrame || id == 0 {
		return false, nil
	}
	end := http2.Flags(h[4]).Has(http2.FlagDataEndStream)
	_, _ = c.br.Discard(9) // peeked: cannot fail
	c.lastRead.Store(time.Now().UnixNano())
	return true, c.data(id, n, end, &framePayload{r: c.br, n: n})
}

// data takes a DATA frame of length n (padding included) on stream id:
// flow control, then the stream's messages from pl.
func (c *h2Conn) data(id uint32, n int, end bool, pl *framePayload) error {
	if n > 0 {
		c.w.oweWindow()
	}
	c.recvWindow -= int64(n)
	if c.recvWindow < 0 {
		c.goAwayError(http2.ErrCodeFlowControl, "the client sent past the connection window")
		return errors.New("connection flow control violated")
	}
	c.connUnack += n
	if c.connUnack >= h2ConnWindow/4 {
		incr := c.connUnack
		c.connUnack = 0
		c.recvWindow += int64(incr)
		c.w.windowUpdate(0, uint32(incr))
	}
	s := c.stream(id)
	if s == nil {
		if id > c.maxStreamID.Load() {
			c.goAwayError(http2.ErrCodeProtocol, fmt.Sprintf("DATA on idle stream %d", id))
			return errors.New("DATA on an idle stream")
		}
		return pl.skip() // a stream that has ended: its data is dropped
	}
	s.rmu.Lock()
	ended := s.recvEnd
	s.rmu.Unlock()
	if ended {
		c.streamError(id, http2.ErrCodeStreamClosed)
		return pl.skip()
	}
	c.mu.Lock()
	over := s.recvUsed+n > int(c.srv.limits.StreamWindow)+s.recvGiven
	if !over {
		s.recvUsed += n
	}
	c.mu.Unlock()
	if over {
		c.streamError(id, http2.ErrCodeFlowControl)
		return pl.skip()
	}
	// Padding counts against the window but carries nothing: given back
	// at once.
	pad := n - pl.n
	if err := c.requestData(s, pl, end); err != nil {
		return err
	}
	if pad > 0 {
		c.returnStreamWindow(s, pad)
	}
	return nil
}

// requestData parses a stream's request bytes into messages and hands
// them on; end is the client's half-close. Bytes after a refused message
// are dropped. An error is the connection's (reading the payload failed).
func (c *h2Conn) requestData(s *h2Stream, pl *framePayload, end bool) error {
	limit := c.srv.limits.MaxRecvMsgSize
	taken := 0
	for pl.n > 0 && s.recvErrLocked() == nil {
		if s.prefixLen < 5 {
			k := min(pl.n, 5-s.prefixLen)
			if err := pl.read(s.prefix[s.prefixLen : s.prefixLen+k]); err != nil {
				return err
			}
			s.prefixLen += k
			taken += k
			if s.prefixLen < 5 {
				break
			}
			size := int(binary.BigEndian.Uint32(s.prefix[1:]))
			if s.prefix[0] > 1 {
				// Only bit 0 (compressed) is defined; answered as grpc-go
				// answers it (README: requests no gRPC client sends).
				s.refuse(status.Errorf(codes.Internal, "grpc: received unexpected payload format %d", s.prefix[0]))
				break
			}
			if size > limit {
				s.refuse(receivedTooLarge(size, limit))
				break
			}
			s.body.start(size)
		}
		k := min(pl.n, s.body.left())
		if err := pl.read(s.body.next(k)); err != nil {
			return err
		}
		taken += k
		if s.body.left() == 0 {
			wire := messageHeader + len(s.body.b)
			msg, err := c.decode(s)
			if err != nil {
				s.refuse(err)
				break
			}
			s.prefixLen = 0
			s.message(msg, wire)
		}
	}
	if err := pl.skip(); err != nil {
		return err
	}
	if taken > 0 {
		c.takeStreamWindow(s, taken)
	}
	if end {
		if s.prefixLen > 0 {
			// A message the half-close cut short is no message, as for
			// grpcio: a unary call then has none (UNIMPLEMENTED, "requires
			// exactly one request message"), a request stream just ends.
			s.body.drop()
			s.prefixLen = 0
		}
		s.halfClose()
	}
	c.mu.Lock()
	waiting := !s.dispatched && !s.released
	c.mu.Unlock()
	if waiting && s.requestReady() {
		c.dispatch(s)
	}
	s.kickDelivery()
	return nil
}

// decode turns the assembled message into a buffer for the front,
// decompressing it when its flag says so.
func (c *h2Conn) decode(s *h2Stream) (mem.BufferSlice, error) {
	if s.prefix[0]&1 == 0 && s.body.buf == nil && !s.firstMsgTaken {
		// The stream's first small message (a unary call's request): its
		// wrappers in the stream's memory (see h2Stream.firstMsg).
		s.firstMsgTaken = true
		s.firstMsg = s.body.takeBytes()
		s.firstMsgBufs[0] = &s.firstMsg
		return s.firstMsgBufs[:1:1], nil
	}
	body := s.body.take()
	if s.prefix[0]&1 == 0 {
		return mem.BufferSlice{body}, nil
	}
	defer body.Free()
	enc := s.req.encoding
	if enc == "" || enc == identity {
		return nil, status.Error(codes.Internal, "grpc: compressed flag set with identity or empty encoding")
	}
	return decompress(enc, body.ReadOnlyData(), c.srv.limits.MaxRecvMsgSize)
}

// messageBody is the request message a stream is assembling. A large one
// lives in a buffer from requestPool, which its Free (by whoever ends up
// holding the message: Event.Release) returns there, so the reader neither
// allocates nor zeroes it afresh for each message. Reader only.
type messageBody struct {
	buf    *[]byte // pooled (nil: a small message in a plain slice, or none)
	b      []byte  // the message's bytes, len its size
	filled int
}

// start begins a message of size bytes.
func (m *messageBody) start(size int) {
	m.filled = 0
	if mem.IsBelowBufferPoolingThreshold(size) {
		m.buf, m.b = nil, make([]byte, size)
		return
	}
	m.buf = requestPool.Get(size)
	m.b = *m.buf
}

func (m *messageBody) left() int { return len(m.b) - m.filled }

// next is the room for the message's next k bytes, counted as filled.
func (m *messageBody) next(k int) []byte {
	m.filled += k
	return m.b[m.filled-k : m.filled]
}

// takeBytes hands over a complete message that is a plain slice (buf is
// nil); the body is empty after.
func (m *messageBody) takeBytes() []byte {
	b := m.b
	*m = messageBody{}
	return b
}

// drop lets go of a message that won't be completed; the body is empty
// after.
func (m *messageBody) drop() {
	if m.buf != nil {
		requestPool.Put(m.buf)
	}
	*m = messageBody{}
}

// take hands the complete message over; the body is empty after.
func (m *messageBody) take() mem.Buffer {
	var out mem.Buffer
	if m.buf != nil {
		out = mem.NewBuffer(m.buf, requestPool)
	} else {
		out = mem.SliceBuffer(m.b)
	}
	*m = messageBody{}
	return out
}

// requestPool holds request message buffers in power-of-two size classes
// from 1 KiB (grpc's pooling threshold) to 4 MiB; larger messages are
// allocated as they come. Unlike grpc's default pool it never zeroes a
// buffer: the reader overwrites every byte of a message before anyone
// sees it, and grpc's default tiers would put a 64 KiB message in a 1 MiB
// buffer cleared on every Get.
var requestPool = newClassPool(10, 22)

// classPool is a mem.BufferPool of sync.Pools, one per power of two from
// 2^minShift to 2^maxShift bytes.
type classPool struct {
	minShift int
	classes  []sync.Pool
}

func newClassPool(minShift, maxShift int) *classPool {
	return &classPool{minShift: minShift, classes: make([]sync.Pool, maxShift-minShift+1)}
}

// class is the index of the smallest class holding n bytes (-1: none).
func (p *classPool) class(n int) int {
	i := max(bits.Len(uint(n-1))-p.minShift, 0)
	if i >= len(p.classes) {
		return -1
	}
	return i
}

// Get returns a buffer of length n; its bytes are not cleared.
func (p *classPool) Get(n int) *[]byte {
	i := p.class(n)
	if i < 0 {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.classes[i].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(i+p.minShift))
	return &b
}

// Put takes back a buffer Get returned (others are left to the GC).
func (p *classPool) Put(b *[]byte) {
	c := cap(*b)
	if i := p.class(c); i >= 0 && c == 1<<(i+p.minShift) {
		p.classes[i].Put(b)
	}
}
