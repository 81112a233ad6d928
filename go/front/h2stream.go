package front

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// h2Stream is one call on the h2 transport, as a ServerStream.
//
// Ownership: the connection's reader creates it and feeds its request
// side; until it is dispatched (handed to the front) the reader also ends
// it. Once dispatched, the goroutine running the front's handler owns the
// send side and ends it (finish, then release). Fields say who guards them.
type h2Stream struct {
	c   *h2Conn
	id  uint32
	req h2Request // set by the reader before the stream is shared; read-only after
	// ctx ends when the call ends on the wire (reset, connection lost,
	// deadline); endContext ends it. It is base, or what admission made
	// of base (a context.WithValue).
	ctx  context.Context
	base streamContext
	// timer runs expire at the deadline (nil without one); armed under
	// c.mu before the stream is in c.streams, stopped by endLocked.
	timer *time.Timer
	// stats is the CallStats value of the call (nil when not measured).
	stats any

	// Send side, owner only (sendWindow under the writer's mu).
	sendWindow int64
	headerSent bool
	finished   bool
	compressor string // response encoding, "" for none
	// wakeOnEnd: a sender waiting for window is woken when ctx ends
	// (registered the first time one waits; under the writer's mu).
	wakeOnEnd bool
	// writeBy: who writes the owner's frames (WriteBy).
	writeBy writeBy

	// Receive side, reader only: the gRPC message being assembled.
	prefix    [5]byte
	prefixLen int
	body      messageBody
	// Stream flow control, under c.mu: bytes received, window given back
	// so far, and taken but not yet given back.
	recvUsed, recvGiven, recvUnack int
	dispatched                     bool // handed to the front (under c.mu)
	// headersPlan: handed over at once or when its request is in, on the
	// reader or a worker, with its place under maximum_concurrent_rpcs
	// taken or not (handler.planAtHeaders). Set before the stream is
	// shared. A place taken is the front's once the stream is dispatched,
	// given back by endStream otherwise.
	headersPlan
	released bool // gone from the connection (under c.mu)
	// endHook is told when the call ends on the wire (NotifyEnd). Under
	// c.mu. Whoever ends the stream's context explicitly (peerReset2,
	// endStream, close) cancels it under c.mu and takes the hook in the
	// same critical section; the deadline's end is told by expire, which
	// runs after ctx has ended and takes the hook under c.mu. NotifyEnd,
	// under c.mu, tells the hook at once if ctx has already ended (or the
	// stream is released, reset or its connection closed, which imply it)
	// and stores it otherwise. So the hook is told exactly once, always
	// after ctx has ended, and outside c.mu.
	endHook wireEndHook

	// Request hand-off, under rmu.
	rmu  sync.Mutex
	msgs []queuedMessage // complete messages not yet handed over
	// msgsBuf is msgs' backing array while few messages wait (message,
	// popMsgLocked): a unary request, or a stream taken as it comes,
	// queues its messages without allocating.
	msgsBuf    [1]queuedMessage
	taken      messageTally // the messages handed over (popMsgLocked)
	recvEnd    bool         // the client half-closed
	recvErr    error        // the transport refused a message (status error)
	backlog    int          // window held back while msgs wait for credit
	sink       RequestSink
	credit     int
	delivering bool // a goroutine is handing messages to sink
	sinkEnded  bool // sink.End was called
	cutOff     bool // the call ended on the wire
	// requestInClosed says that Request has its answer (a message, the
	// half-close or a refusal). requestIn is made only by a Request that
	// has to wait for it (the reader hands unary calls over once their
	// request is in, so most never do), and closed when it comes.
	requestIn       chan struct{}
	requestInClosed bool

	// firstMsg and firstMsgBufs are the stream's first request message,
	// when small and uncompressed, and its BufferSlice: a unary request
	// handed over without allocating its wrappers. Set once by the reader
	// (firstMsgTaken); owned by whoever holds the message after that, as
	// any message is (a SliceBuffer's Free does nothing).
	firstMsg      mem.SliceBuffer
	firstMsgBufs  [1]mem.Buffer
	firstMsgTaken bool

	// sent counts the messages that went out, from whichever goroutine
	// sends them; the stream's end reports them with taken (endStream).
	sent sentTally

	// callMem is the memory of the front's call for this stream (see
	// callMemory), taken once (callMemTaken) by the goroutine serving the
	// call; the front owns it from then on.
	callMem      call
	callMemTaken bool
}

// baseContext is the streamContext under the call's context (ctx), for
// the call's own context to be linked to (handler.newCall).
func (s *h2Stream) baseContext() *streamContext { return &s.base }

// endLocked ends the stream's context and takes its end hook, under c.mu;
// the caller tells the hook once out of c.mu (tellEnd). The deadline's
// timer is stopped: this end tells the hook itself.
func (s *h2Stream) endLocked() wireEndHook {
	if s.timer != nil {
		s.timer.Stop()
	}
	s.endContext()
	return s.takeEndHookLocked()
}

// endContext ends the stream's context (idempotent).
func (s *h2Stream) endContext() { s.base.cancel(context.Canceled) }

// takeCallMemory: see callMemory.
func (s *h2Stream) takeCallMemory() *call {
	if s.callMemTaken {
		return nil
	}
	s.callMemTaken = true
	return &s.callMem
}

// HoldsSlot: see slotHolder.
func (s *h2Stream) HoldsSlot() bool { return s.slot }

func (s *h2Stream) Context() context.Context    { return s.ctx }
func (s *h2Stream) Method() string              { return s.req.method }
func (s *h2Stream) Header() [][2]string         { return s.req.header }
func (s *h2Stream) Conn() *connState            { return s.c.cs }
func (s *h2Stream) Security() *ConnSecurity     { return s.c.security }
func (s *h2Stream) ClientCompressors() []string { return s.req.accept }

// Request waits for the call's one request (the reader dispatches unary
// calls only once it is in, so this rarely waits).
func (s *h2Stream) Request() (mem.BufferSlice, error) {
	s.rmu.Lock()
	if !s.requestInClosed { // ready is the rule: ctx.Done() is made only to wait
		if s.requestIn == nil {
			s.requestIn = make(chan struct{})
		}
		in := s.requestIn
		s.rmu.Unlock()
		select {
		case <-in:
		case <-s.ctx.Done():
			return nil, s.ctx.Err()
		}
		s.rmu.Lock()
	}
	defer s.rmu.Unlock()
	if len(s.msgs) > 0 {
		return s.popMsgLocked(), nil
	}
	if s.recvErr != nil {
		return nil, s.recvErr
	}
	return nil, io.EOF
}

func (s *h2Stream) StartRequests(sink RequestSink) {
	s.rmu.Lock()
	s.sink = sink
	s.rmu.Unlock()
}

// Credit lets n more messages (or the end) go to the sink. It never calls
// the sink itself (the sink may call Credit while it holds its own lock):
// a goroutine hands over what is already queued.
func (s *h2Stream) Credit(n int) {
	if n <= 0 {
		return
	}
	s.rmu.Lock()
	if !s.recvEnd {
		s.c.w.oweWindow() // as grpc-core owes one when a read is asked for
	}
	s.credit += n
	start := s.sink != nil && !s.delivering && s.deliverable()
	if start {
		s.delivering = true
	}
	s.rmu.Unlock()
	if start {
		go s.deliver()
	}
}

// deliverable: something waits that the credit lets through. rmu held.
func (s *h2Stream) deliverable() bool {
	if s.sinkEnded || s.credit <= 0 {
		return false
	}
	return len(s.msgs) > 0 || s.recvEnd || s.recvErr != nil
}

// deliver hands queued messages (then the end) to the sink while credit
// lasts; the caller set delivering. One goroutine at a time, so the sink is
// called in order and never concurrently.
func (s *h2Stream) deliver() {
	for {
		s.rmu.Lock()
		if !s.deliverable() {
			s.delivering = false
			backlog := 0
			if len(s.msgs) == 0 {
				backlog, s.backlog = s.backlog, 0
			}
			s.rmu.Unlock()
			if backlog > 0 {
				s.c.returnStreamWindow(s, backlog)
			}
			return
		}
		s.credit--
		if len(s.msgs) > 0 {
			m := s.popMsgLocked()
			s.rmu.Unlock()
			s.sink.Message(m)
			continue
		}
		s.sinkEnded = true
		err := s.recvErr
		s.rmu.Unlock()
		s.sink.End(err)
	}
}

// SendHeader queues the response headers; they go out with the next flush.
func (s *h2Stream) SendHeader(md Metadata) error {
	if s.headerSent {
		return status.Error(codes.Internal, "transport: the stream has already sent its headers")
	}
	if s.finished {
		return status.Error(codes.Internal, "transport: the stream is done")
	}
	s.headerSent = true
	var buf [headerFieldsOnStack]headerField
	fields := s.responseHeader(buf[:0], md)
	return s.c.w.queueHeaders(s.id, false, fields, nil)
}

// headerFieldsOnStack is how many header fields SendHeader and Finish
// gather on the stack (the writer encodes them and keeps nothing); more
// metadata than that moves them to the heap.
const headerFieldsOnStack = 8

// responseHeader appends the response headers to fields, the fixed ones
// as grpcio's server sends them (grpc-accept-encoding too).
func (s *h2Stream) responseHeader(fields []headerField, md Metadata) []headerField {
	fields = append(fields, headerField{":status", "200"}, headerField{"content-type", "application/grpc"})
	if s.compressor != compressNone {
		fields = append(fields, headerField{"grpc-encoding", s.compressor})
	}
	fields = append(fields, headerField{"grpc-accept-encoding", s.c.srv.acceptEncoding})
	return appendMetadata(fields, md, s.c.trueBinary.Load())
}

// appendMetadata adds metadata as header fields, in order (values of -bin
// keys encoded by binaryValue), leaving out what the transport writes
// itself, with the values grpcio's server would send (asGRPCCoreSends).
func appendMetadata(fields []headerField, md Metadata, trueBinary bool) []headerField {
	for _, kv := range md {
		k, v := kv[0], asGRPCCoreSends(kv[0], kv[1])
		if leftOutOfResponse(k) {
			continue
		}
		if binaryKey(k) {
			v = binaryValue(v, trueBinary)
		}
		fields = append(fields, headerField{k, v})
	}
	return fields
}

// settingTrueBinary is grpc-core's SETTINGS parameter (0xfe03, "grpc
// allow true binary metadata"): a peer that sends 1 takes -bin values raw,
// a NUL byte then the bytes, instead of base64, as grpcio's clients and
// servers do with each other. Raw values are 3/4 of the size, which
// matters against grpcio's client metadata limits (8 KiB soft, 16 KiB
// hard, counted as sent): large rich error details get through as often
// as from grpcio's server. The server sends 1 too, and reads raw values.
const settingTrueBinary http2.SettingID = 0xfe03

// binaryValue is a -bin value as sent: raw after a NUL to a client that
// takes it (settingTrueBinary), base64 to any other.
func binaryValue(v string, trueBinary bool) string {
	if trueBinary {
		return "\x00" + v
	}
	return base64.RawStdEncoding.EncodeToString([]byte(v))
}

// SendMessage writes one message (headers first if not sent), compressed
// with the call's encoding unless uncompressed. The frames go out with the
// next flush, or at once when flow control makes the sender wait.
func (s *h2Stream) SendMessage(b mem.BufferSlice, uncompressed bool) (err error) {
	defer func() {
		if err != errSendWouldWait { // else the caller still owns b
			b.Free()
		}
	}()
	if s.finished {
		return status.Error(codes.Internal, "transport: the stream is done")
	}
	if !s.headerSent {
		if err := s.SendHeader(nil); err != nil {
			return err
		}
	}
	var prefix [5]byte
	var parts [][]byte
	if s.compressor != compressNone && !uncompressed && b.Len() > 0 {
		// A message goes compressed only if that makes it smaller, as
		// grpc-core sends it: not an empty one (gzip would make 23 bytes
		// of it), nor short or random ones.
		z, err := compress(s.compressor, b)
		if err != nil {
			return status.Errorf(codes.Internal, "grpc: error while compressing: %v", err)
		}
		if len(z) < b.Len() {
			prefix[0] = 1
			parts = [][]byte{z}
		}
	}
	if parts == nil {
		parts = make([][]byte, 0, len(b))
		for _, buf := range b {
			parts = append(parts, buf.ReadOnlyData())
		}
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	prefix[1], prefix[2], prefix[3], prefix[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	if err := s.c.w.sendMessage(s, prefix, parts, !s.writeBy.noWait); err != nil {
		if err == errSendWouldWait {
			return err
		}
		if s.ctx.Err() != nil {
			return s.ctx.Err()
		}
		return err
	}
	if s.stats != nil {
		s.sent.add(n + 5)
	}
	if s.readAsked() {
		// grpc-core's call asks for its next request once this send is
		// done: the window update it then owes goes with the connection's
		// next frame, not with this one (the ping policy's windowOwed).
		s.c.w.oweWindow()
	}
	return nil
}

// readAsked: the client's side is open and a request message is asked for
// (credit given and not used: a reader waits, or reads ahead).
func (s *h2Stream) readAsked() bool {
	s.rmu.Lock()
	asked := !s.recvEnd && s.credit > 0
	s.rmu.Unlock()
	return asked
}

// compress encodes b with the named compressor.
func compress(name string, b mem.BufferSlice) ([]byte, error) {
	comp := encoding.GetCompressor(name)
	if comp == nil {
		return nil, status.Errorf(codes.Internal, "grpc: compressor %q is not installed", name)
	}
	var out bytes.Buffer
	w, err := comp.Compress(&out)
	if err != nil {
		return nil, err
	}
	for _, buf := range b {
		if _, err := w.Write(buf.ReadOnlyData()); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// SetCompressor takes effect until the headers are sent; an encoding the
// client didn't offer falls back to none, as with grpc-go's transport.
func (s *h2Stream) SetCompressor(name string) {
	if s.headerSent {
		return
	}
	if name == identity {
		name = compressNone
	}
	if name != compressNone && (encoding.GetCompressor(name) == nil || !s.clientAccepts(name)) {
		name = compressNone
	}
	s.compressor = name
}

func (s *h2Stream) clientAccepts(name string) bool {
	for _, a := range s.req.accept {
		if a == name {
			return true
		}
	}
	return false
}

func (s *h2Stream) SendCompressor() string { return s.compressor }

// Flush writes out what the owner queued.
func (s *h2Stream) Flush() { s.c.w.flush(s.writeBy) }

// WriteBy: see inlineStream.
func (s *h2Stream) WriteBy(by writeBy) { s.writeBy = by }

// Finish writes the status and trailers (trailers-only when no headers
// went out) and ends the stream.
func (s *h2Stream) Finish(st *status.Status, trailer Metadata) { s.finish(st, trailer, false) }

// finish is Finish; with reset, RST_STREAM NO_ERROR follows the trailers
// even where the client has sent all of its request, as grpcio's server
// ends a call whose deadline passed (a grpcio client then reads "Stream
// removed (Deadline Exceeded)", as against grpcio).
func (s *h2Stream) finish(st *status.Status, trailer Metadata, reset bool) {
	if s.finished {
		return
	}
	s.finished = true
	code, msg := codes.OK, ""
	var details []byte
	if st != nil {
		code, msg = st.Code(), st.Message()
		if p := st.Proto(); p != nil && len(p.GetDetails()) > 0 {
			details, _ = proto.Marshal(p)
		}
	}
	var buf [headerFieldsOnStack]headerField
	fields := buf[:0]
	if !s.headerSent {
		fields = append(fields, headerField{":status", "200"}, headerField{"content-type", "application/grpc"})
	}
	// grpc-message even when empty, as grpcio's and grpc-go's servers send it.
	fields = append(fields, headerField{"grpc-status", strconv.Itoa(int(code))}, headerField{"grpc-message", encodeGRPCMessage(msg)})
	if details != nil {
		fields = append(fields, headerField{statusDetailsKey, binaryValue(string(details), s.c.trueBinary.Load())})
		trailer = trailer.without(statusDetailsKey)
	}
	fields = appendMetadata(fields, trailer, s.c.trueBinary.Load())
	// A client still sending is told to stop (RST_STREAM NO_ERROR after
	// the trailers), as HTTP/2 allows a server that has answered; a client
	// whose request the transport refused (over the size limit) included:
	// the rest of its request is dropped without window given back, so
	// one that sends it all before reading would wait for window forever.
	var after func([]byte) []byte
	if reset || !s.clientHalfClosed() {
		after = func(b []byte) []byte { return appendRSTStream(b, s.id, http2.ErrCodeNo) }
	}
	// The status is queued, then the stream leaves the connection's
	// count, then the status goes out: a client that has the status may
	// open another stream at once, and must not find this one still
	// counted against max_concurrent_streams; and a connection that closes
	// once its last stream has left (a graceful stop) finds the status
	// queued, and writes it first (h2Writer.settle).
	_ = s.c.w.queueHeaders(s.id, true, fields, after)
	s.c.endStream(s, code, false)
	s.c.w.flush(s.writeBy)
}

// finishWith ends a stream whose handler returned without Finish: with
// err's status; with DEADLINE_EXCEEDED once the call's deadline has passed
// (whatever the handler said: grpcio's server ends such a call with that
// status, then RST_STREAM NO_ERROR, and a CANCEL reset reaching the client
// before its own timer fires reads there as CANCELLED); or with RST_STREAM
// CANCEL when the call already ended on the wire otherwise (the peer's
// reset, the connection's close).
func (s *h2Stream) finishWith(err error) {
	if s.finished {
		return
	}
	cause := s.ctx.Err()
	if dl := s.base.deadline; cause == nil && !dl.IsZero() && !time.Now().Before(dl) {
		// The front's own end at the deadline, which came before the
		// stream's (their timers run at the same moment).
		cause = context.DeadlineExceeded
	}
	if cause != nil {
		if errors.Is(cause, context.DeadlineExceeded) && !s.c.peerReset(s) {
			s.finish(deadlineStatus, nil, true)
			return
		}
		s.reset(http2.ErrCodeCancel)
		return
	}
	s.Finish(status.Convert(err), nil)
}

// reset ends the stream with RST_STREAM (unless the peer reset it).
func (s *h2Stream) reset(code http2.ErrCode) {
	if s.finished {
		return
	}
	s.finished = true
	if !s.c.peerReset(s) {
		s.c.w.control(func(b []byte) []byte { return appendRSTStream(b, s.id, code) })
	}
	s.c.endStream(s, codes.Canceled, true)
}

// clientHalfClosed: the client has sent its request's END_STREAM.
func (s *h2Stream) clientHalfClosed() bool {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return s.recvEnd
}
