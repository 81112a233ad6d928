package front

import (
	"context"
	"net"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// The seam between a transport (HTTP/2 and gRPC framing) and the front
// (calls, events, Python). grpc-go's server is its one implementation today
// (grpcgo.go); per-call code outside that file knows a call only through
// ServerStream, and the front knows the server only through
// transportServer.
//
// The seam is shaped so that a transport with no goroutine per call can
// implement it: incoming parts are pushed to the front (a call is handed
// over when its request is complete, or at once for request streams, whose
// messages go to a RequestSink as the front grants credit), and nothing the
// front calls on a stream needs a goroutine of the call's own behind it.
// Sends are made by whoever owns the call at the moment (stream.serve
// today); a transport that can't take a message without waiting for flow
// control must buffer it within the call's bounds or report that it has no
// room, never block a Python thread: Python's threads never call a
// ServerStream directly, they post ops to the call (ops.go), and that op
// queue is the call's bounded buffer.

// ServerStream is one call as its transport carries it.
//
// Properties (Context, Method, Header, Conn, Security, ClientCompressors)
// may be read from any goroutine. Sends (SendHeader, SendMessage,
// SetCompressor, Finish) come from one goroutine at a time, in order, and
// none after Finish.
type ServerStream interface {
	// Context ends when the call ends on the wire: the client cancelled or
	// reset it, its connection was lost, or the server stopped. Its
	// deadline is the client's grpc-timeout.
	Context() context.Context
	// Method is the request path, "/package.Service/Method".
	Method() string
	// Header is the request metadata as (key, value) pairs, in the order
	// the transport knows (per-hop keys such as :authority included; see
	// perHopKey). A key may repeat.
	Header() [][2]string
	// Conn is the connection's state (peer address, call order); nil for a
	// connection no listener of ours accepted.
	Conn() *connState
	// Security is what the connection proves about the client.
	Security() *ConnSecurity
	// ClientCompressors are the encodings the client accepts
	// (grpc-accept-encoding).
	ClientCompressors() []string

	// Request reads the one request of a unary-request call; io.EOF if
	// the client half-closed without one, a status error when the
	// transport refused it (e.g. over the size limit; the client gets that
	// status). The caller owns the message.
	Request() (mem.BufferSlice, error)
	// StartRequests begins pushing the call's request messages to sink:
	// one Message per credit granted with Credit, then End. Only for
	// request streams, once, and never together with Request.
	StartRequests(sink RequestSink)
	// Credit lets the transport read n more request messages (or the end
	// of the stream) for the sink. Any goroutine; never blocks.
	Credit(n int)

	// SendHeader sends the response's initial metadata; a second call is
	// an error.
	SendHeader(md Metadata) error
	// SendMessage sends one response message (uncompressed: with the
	// compressed flag off whatever the call's compression). The stream owns
	// b from here on, unless it reports errSendWouldWait (an inlineStream
	// whose sender must not wait: nothing was sent). A status error is
	// the server's verdict on the message (too large, not compressible)
	// and goes to the client; any other error means the call is gone from
	// the wire (reset, connection lost), even if Context hasn't ended yet.
	SendMessage(b mem.BufferSlice, uncompressed bool) error
	// SetCompressor sets the response encoding ("" for none) until the
	// initial metadata is sent; one the client doesn't accept falls back to
	// none.
	SetCompressor(name string)
	// SendCompressor is the response encoding set so far ("" for none).
	SendCompressor() string
	// Flush writes out what the sends above queued. A transport may hold
	// sent frames until Flush or Finish so that the answers of one batch of
	// ops go out in one write; an owner that is about to wait (for Python,
	// for a message to relay, for a health change) calls Flush first.
	Flush()
	// Finish ends the call with a status (its details proto included; nil
	// is OK) and trailing metadata, and writes it out.
	Finish(s *status.Status, trailer Metadata)
}

// RequestSink receives one call's request stream (ServerStream.
// StartRequests). Its methods are called from one goroutine at a time.
type RequestSink interface {
	// Message takes one request message; the sink owns it. Called only
	// within the credit granted.
	Message(b mem.BufferSlice)
	// End reports the end of the request stream, once: err is nil when the
	// client half-closed, a status error when the transport refused a
	// message (the call must end with that status), and any other error
	// when the call ended on the wire (its Context says why).
	End(err error)
}

// transportServer is a transport's server side: it serves listeners,
// admitting each call through the front's admission hook before the call
// starts, and stops gracefully (GOAWAY, then waiting for calls) or at once.
// Keepalive, connection age and the other Limits are its business, set when
// it is made.
type transportServer interface {
	Serve(l net.Listener) error
	GracefulStop()
	Stop()
}

// stopCanceller is a transportServer that says, as its connections go
// away, that the stop gives calls no grace (grpcio's words for it); told
// before GracefulStop.
type stopCanceller interface {
	cancelsAllOnStop()
}

// CallStats is told of each call's life on the wire, for metrics: when its
// first HEADERS arrived, the wire size of every message each way, and how it
// ended (trailers written, or reset). Every call the transport carries is
// reported, including those the front refuses or answers itself (health).
// It is called from the transport's goroutines, concurrently for different
// calls (one call's from one goroutine at a time), and must not block; the
// front installs none unless asked (Front.SetStats), so a call costs nothing
// for it by default.
type CallStats interface {
	// Begin: the call's first HEADERS arrived at t. The returned value is
	// passed back for the call's later stats.
	Begin(method string, t time.Time) any
	// Messages: count messages of wireSize bytes in all (their compressed
	// sizes, as sent or received, each with its 5-byte gRPC message header)
	// went out (out) or were taken in by the front (a message the front
	// never asked for, as a refused call's request, is not counted: grpcio
	// counts what its application reads). Called before End, never after.
	Messages(call any, out bool, count, wireSize int)
	// End: the call ended at t, with the status sent in the trailers (code)
	// or reset (reset true, code meaningless).
	End(call any, t time.Time, code codes.Code, reset bool)
}
