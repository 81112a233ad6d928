package front

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// h2Socket is a connection's socket as the h2 transport writes it: a write
// never waits for the peer. What the kernel takes at once is written by the
// caller (a Python thread answering a call, with the GIL released); the rest
// waits in pending, which a goroutine of the connection's writes out,
// blocking, while the peer is slow. Reads go to the socket as they are.
//
// This keeps a handler's thread (or an event loop) off a full socket, as
// the seam asks, at the cost of buffering, which is bounded elsewhere:
// DATA by the peer's flow-control windows and, for a peer that grants
// windows and doesn't read, by the connection's backlog (h2Writer's
// backlogLocked: senders past maxPending leave their messages to a
// goroutine that waits), and control frames by the reader, which stops
// reading while more than maxReadBacklog waits (waitBelow). A write
// itself never waits: a writer may be a Python thread holding the GIL.
type h2Socket struct {
	net.Conn
	raw syscall.RawConn // nil: the socket can't be written without waiting
	// inner is the socket under the listener's counting conn (nil: Conn
	// is the socket): drain writes pending to it in one writev, and counts.
	inner net.Conn

	mu sync.Mutex
	// pending is what the kernel didn't take, in order, as the buffers it
	// came in when the writer gave them up (writeTaking), or copies (Write);
	// the socket owns them, and hands them to writeBufs once written.
	// pendingLen is their length in all. draining: the goroutine writing
	// them runs; err is the first write error, returned by every later
	// write; room is signalled when pending shrinks (the reader's brake,
	// waitBelow, and waitWritten wait for it). spare is the list drain last wrote out,
	// kept for pending's next use.
	pending    [][]byte
	pendingLen int
	spare      [][]byte
	iov        net.Buffers // drain's own (writeWaiting)
	draining   bool
	err        error
	room       *sync.Cond
	try        rawTry
	// muted: writes from now on are dropped (refuseClient).
	muted bool
	// rd is Read's state, like try's (the reader's goroutine only).
	rd rawRead
	// backlog is pendingLen for readers without mu (the writer's bound);
	// drain lowers it before it calls onDrained.
	backlog atomic.Int64
	// onDrained, set before the first write, is called (without mu) each
	// time drain has written a batch out.
	onDrained func()
}

// maxPending bounds the backlog a connection's senders add messages to
// (h2Writer.backlogLocked); maxReadBacklog is where its reader stops
// reading until the backlog is back under maxPending (a peer that sends
// pings, say, and never reads the acks).
const (
	maxPending     = 16 << 20
	maxReadBacklog = 2 * maxPending
)

// takeAtLeast is the smallest remainder writeTaking keeps as it is: a
// smaller one is copied, so that pending stays a few large buffers.
const takeAtLeast = 32 << 10

func newH2Socket(c net.Conn) *h2Socket {
	s := &h2Socket{Conn: c}
	s.room = sync.NewCond(&s.mu)
	s.try.fn = s.try.write
	s.rd.fn = s.rd.read
	inner := c
	if lc, ok := c.(*conn); ok {
		inner = lc.Conn
		s.inner = inner
	}
	if sc, ok := inner.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			s.raw = raw
		}
	}
	return s
}

// muteWrites drops what is written from now on (writeMuter: a client
// refused at the end of its TLS handshake gets no alert, refuseClient).
func (s *h2Socket) muteWrites() {
	s.mu.Lock()
	s.muted = true
	s.mu.Unlock()
	if m, ok := s.Conn.(writeMuter); ok {
		m.muteWrites() // and the listener's conn reads what is unread as it closes
	}
}

// Write takes all of b (or fails with the connection's error): the part
// the kernel doesn't take at once is copied and written later, in order.
// Callers that can give b up use writeTaking.
func (s *h2Socket) Write(b []byte) (int, error) {
	_, err := s.write(b, false)
	if err != nil {
		return 0, err
	}
	return len(b), nil
}

// writeTaking is Write for a buffer its caller gives up if the kernel
// can't take all of it at once: then the socket keeps b itself as what
// waits, no copy, and reports taken; the caller must not touch b again. A
// large answer the kernel can't take at once (a message of megabytes, a
// client reading slowly) is then not copied a second time, nor into
// freshly faulted memory: 1 MiB messages cost a third of the CPU.
func (s *h2Socket) writeTaking(b []byte) (taken bool, err error) {
	return s.write(b, true)
}

func (s *h2Socket) write(b []byte, give bool) (taken bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false, s.err
	}
	if s.muted {
		return false, nil
	}
	if !s.draining { // nothing waits: the kernel may take b now, in order
		k, err := s.tryWrite(b)
		if err != nil {
			s.err = err
			return false, err
		}
		b = b[k:]
		if k > 0 {
			s.countOut(k)
		}
	}
	if len(b) == 0 {
		return false, nil
	}
	s.pendingLen += len(b)
	s.backlog.Add(int64(len(b)))
	if last := len(s.pending) - 1; last >= 0 && len(b) < takeAtLeast && len(s.pending[last])+len(b) <= cap(s.pending[last]) {
		// A small remainder joins the last buffer waiting (the socket's).
		s.pending[last] = append(s.pending[last], b...)
		return false, nil
	}
	if !give || len(b) < takeAtLeast {
		b = append(getWriteBuf(), b...)
		give = false
	}
	s.pending = append(s.pending, b)
	if !s.draining {
		s.draining = true
		go s.drain()
	}
	return give, nil
}

// tryWrite writes what the kernel takes now, without waiting. Called with
// mu held.
func (s *h2Socket) tryWrite(b []byte) (int, error) {
	if s.raw == nil {
		// No raw socket (a test's pipe): an ordinary, waiting write.
		return s.Conn.Write(b)
	}
	s.try.b, s.try.n, s.try.err = b, 0, nil
	err := s.raw.Write(s.try.fn)
	n, werr := s.try.n, s.try.err
	s.try.b = nil
	if werr == nil {
		werr = err
	}
	return n, werr
}

// rawTry is tryWrite's state, in the socket so that a write allocates
// nothing (fn is made once, in newH2Socket). Guarded by the socket's mu.
type rawTry struct {
	b   []byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

// write writes b to fd until the kernel takes no more; it never asks to
// wait (drain does the waiting).
func (t *rawTry) write(fd uintptr) bool {
	for len(t.b) > 0 {
		k, err := rawWrite(fd, t.b)
		if k > 0 {
			t.n += k
			t.b = t.b[k:]
			continue
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil && err != unix.EAGAIN {
			t.err = err
		}
		break
	}
	return true
}

// Read reads what the socket has, waiting (in the netpoller, with the
// socket's deadlines) while it has nothing.
func (s *h2Socket) Read(b []byte) (int, error) {
	if s.raw == nil || len(b) == 0 {
		return s.Conn.Read(b)
	}
	s.rd.b, s.rd.n, s.rd.err = b, 0, nil
	err := s.raw.Read(s.rd.fn)
	n, rerr := s.rd.n, s.rd.err
	s.rd.b = nil
	if rerr == nil {
		rerr = err
	}
	if n > 0 {
		if lc, ok := s.Conn.(*conn); ok {
			lc.m.bytesIn.Add(uint64(n))
		}
	}
	return n, rerr
}

// rawRead is Read's state, so that a read allocates nothing (fn is made
// once, in newH2Socket).
type rawRead struct {
	b   []byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

// read reads once into b; false (wait for the socket to be readable) when
// there is nothing to read yet.
func (r *rawRead) read(fd uintptr) bool {
	for {
		n, err := rawReadFD(fd, r.b)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false
		case err != nil:
			r.err = err
		case n == 0:
			r.err = io.EOF
		default:
			r.n = n
		}
		return true
	}
}

// rawWrite and rawReadFD are write(2) and read(2) on a non-blocking socket,
// made as raw system calls: they never wait, so they need none of what
// the runtime does around a call that may block (entersyscall and
// exitsyscall), which wakes the runtime's monitor thread (sysmon) from its
// idle sleep at each call and keeps it polling every 20 µs for the next
// millisecond: at an ordinary paced load, that was 40% of the process's
// context switches.
func rawWrite(fd uintptr, b []byte) (int, error) {
	n, _, errno := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

func rawReadFD(fd uintptr, b []byte) (int, error) {
	n, _, errno := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// drain writes pending out, waiting for the peer, until it is empty.
func (s *h2Socket) drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.pending) > 0 && s.err == nil {
		bufs, n := s.pending, s.pendingLen
		s.pending, s.spare = s.spare[:0], nil
		s.mu.Unlock()
		err := s.writeWaiting(bufs)
		for i, b := range bufs {
			if cap(b) <= maxKeptWriteBuf { // not one a slow peer grew: left to the GC
				putWriteBuf(b)
			}
			bufs[i] = nil
		}
		s.backlog.Add(-int64(n))
		if s.onDrained != nil {
			s.onDrained()
		}
		s.mu.Lock()
		s.pendingLen -= n
		s.spare = bufs[:0]
		if err != nil {
			s.err = err
			break
		}
		s.room.Broadcast()
	}
	if s.err != nil {
		for _, b := range s.pending {
			if cap(b) <= maxKeptWriteBuf {
				putWriteBuf(b)
			}
		}
		s.pending, s.spare, s.pendingLen = nil, nil, 0
		s.backlog.Store(0)
	}
	s.draining = false
	s.room.Broadcast()
}

// waitBelow waits while more than limit bytes wait for the peer, until
// the socket fails or closes: the reader's brake (maxReadBacklog).
func (s *h2Socket) waitBelow(limit int) {
	s.mu.Lock()
	for s.pendingLen > limit && s.err == nil {
		s.room.Wait()
	}
	s.mu.Unlock()
}

// writeWaiting writes bufs in order, waiting for the peer: in one writev
// where the socket is a TCP or Unix one. Called by drain without mu.
func (s *h2Socket) writeWaiting(bufs [][]byte) error {
	if s.inner == nil {
		for _, b := range bufs {
			if _, err := s.Conn.Write(b); err != nil { // the net.Conn's own, waiting write
				return err
			}
		}
		return nil
	}
	s.iov = append(s.iov[:0], bufs...)
	iov := s.iov // WriteTo consumes the list it is given
	n, err := iov.WriteTo(s.inner)
	if lc, ok := s.Conn.(*conn); ok {
		lc.m.bytesOut.Add(uint64(n))
	}
	return err
}

// countOut adds bytes written by tryWrite to the front's counters (the
// listener's conn counts what goes through its own Write).
func (s *h2Socket) countOut(n int) {
	if lc, ok := s.Conn.(*conn); ok && s.raw != nil {
		lc.m.bytesOut.Add(uint64(n))
	}
}

// waitWritten waits until nothing is pending (or timeout passes), so that
// a connection closed on purpose loses none of what it wrote.
func (s *h2Socket) waitWritten(timeout time.Duration) {
	stop := time.AfterFunc(timeout, func() {
		s.mu.Lock()
		s.room.Broadcast()
		s.mu.Unlock()
	})
	defer stop.Stop()
	deadline := time.Now().Add(timeout)
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.draining && s.err == nil && time.Now().Before(deadline) {
		s.room.Wait()
	}
}

// Close closes the socket; waiting writers see the error.
func (s *h2Socket) Close() error {
	err := s.Conn.Close()
	s.mu.Lock()
	if s.err == nil {
		s.err = net.ErrClosed
	}
	s.room.Broadcast()
	s.mu.Unlock()
	return err
}
