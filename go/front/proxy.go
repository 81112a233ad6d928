package front

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// FallbackMethodID routes a call to the fallback server (Route, and
// methods added with AddFallbackMethod).
const FallbackMethodID int32 = -1

// backendStreamDesc lets one proxy serve every method kind: the proxy
// forwards whatever messages each side sends.
var backendStreamDesc = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// fallbackRelay relays calls to the fallback server: the server that
// handles what the native path doesn't. Relayed calls never reach Python.
type fallbackRelay struct {
	conn *grpc.ClientConn
	// sendLimit is grpc.max_send_message_length, enforced on the answers
	// relayed to clients.
	sendLimit int
	m         *metrics
}

// newFallbackRelay connects (lazily: nothing is dialed until the first
// call) to the fallback server at target.
func newFallbackRelay(target string, sendLimit int, m *metrics) (*fallbackRelay, error) {
	if err := checkFallbackTarget(target); err != nil {
		return nil, configErrorf("fallback %q: %v", target, err)
	}
	conn, err := dialFallback(target)
	if err != nil {
		return nil, configErrorf("fallback %q: %v", target, err)
	}
	return &fallbackRelay{conn: conn, sendLimit: sendLimit, m: m}, nil
}

// fallbackSchemes are the target schemes grpc-go resolves without a
// plugin of its own: a target with one is left to grpc-go.
var fallbackSchemes = []string{"unix", "unix-abstract", "dns", "passthrough", "ipv4", "ipv6"}

// checkFallbackTarget refuses, at construction, a target that can't name
// a server: grpc-go's NewClient takes nearly any string, so a missing
// port ("localhost", dialed on 443) or a URL of another protocol
// ("http://host:port") would only show as UNAVAILABLE on relayed calls.
func checkFallbackTarget(target string) error {
	if scheme, _, ok := strings.Cut(target, ":"); ok && slices.Contains(fallbackSchemes, scheme) {
		return nil
	}
	_, port, err := net.SplitHostPort(target)
	if err != nil {
		return fmt.Errorf("not a server address: give host:port, unix:PATH, unix-abstract:NAME or dns:///host:port (%v)", err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a port number (1-65535)", port)
	}
	return nil
}

// close ends the connection to the fallback server.
func (r *fallbackRelay) close() { r.conn.Close() }

// dialFallback connects to target. Message size limits are the fallback's
// own business, and the front's on the client side, so the connection
// between them has none.
func dialFallback(target string) (*grpc.ClientConn, error) {
	return grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(encodingRecorder{}),
		grpc.WithDefaultCallOptions(
			grpc.ForceCodecV2(rawCodec{}),
			grpc.MaxCallRecvMsgSize(math.MaxInt32),
			grpc.MaxCallSendMsgSize(math.MaxInt32),
		),
	)
}

// relay relays one call to the fallback server and back, message by
// message, so flow control holds end to end and no stream is buffered:
// request metadata and the deadline go with the backend call (through the
// call's context, which also carries cancellation from the client); the
// backend's headers, messages, trailers and status come back as they are.
func (r *fallbackRelay) relay(st ServerStream, path string) error {
	// The backend call ends at the call's own deadline (a little before
	// the client's on grpc-go's transport, so that the client gets
	// DEADLINE_EXCEEDED from us rather than the transport's reset).
	ctx, cancel := beforeDeadline(st)
	defer cancel()
	r.m.callsProxied.Add(1)
	backendCtx, relayed := withRelayedEncoding(metadata.NewOutgoingContext(ctx, forwardedMetadata(st.Header())))
	cs, err := r.conn.NewStream(backendCtx, backendStreamDesc, path)
	if err != nil {
		return backendError(err)
	}

	// Client to backend, one message at a time: the next is read once the
	// backend took the last. A failure here ends the backend call through
	// cancel(); the status then comes back on the other direction.
	up := &relayUpstream{msgs: make(chan mem.BufferSlice, 1), end: make(chan error, 1)}
	st.StartRequests(up)
	st.Credit(1)
	go func() {
		for {
			select {
			case m := <-up.msgs:
				if cs.SendMsg(m) != nil {
					return // RecvMsg on cs reports why
				}
				st.Credit(1)
			case err := <-up.end:
				if err == nil {
					_ = cs.CloseSend()
				} else {
					cancel()
				}
				return
			}
		}
	}()

	// Backend to client.
	headerSent := false
	for {
		var m mem.BufferSlice
		err := cs.RecvMsg(&m)
		if !headerSent {
			headerSent = true
			relayed.apply(st)
			// A trailers-only answer has no headers: leave it so.
			if hdr, herr := cs.Header(); herr == nil && len(hdr) > 0 {
				if err := st.SendHeader(metadataOf(hdr)); err != nil {
					return err
				}
				st.Flush()
			}
		}
		if errors.Is(err, io.EOF) {
			st.Finish(status.New(codes.OK, ""), metadataOf(cs.Trailer()))
			return nil
		}
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// The relay's own early deadline (above), worded as grpcio's.
				err = deadlineStatus.Err()
			}
			st.Finish(status.Convert(backendError(err)), metadataOf(cs.Trailer()))
			return nil
		}
		if err := sendMessage(st, m, relayed.uncompressedInCompressed(), r.sendLimit); err != nil {
			return err
		}
		st.Flush()
	}
}

// relayUpstream is the RequestSink of a relayed call: it hands each client
// message (one per credit) to the goroutine that sends it to the backend.
type relayUpstream struct {
	msgs chan mem.BufferSlice // room for one: the credit is one message
	end  chan error
}

func (u *relayUpstream) Message(b mem.BufferSlice) { u.msgs <- b }

func (u *relayUpstream) End(err error) { u.end <- err }

// forwardedMetadata is the client's metadata minus what HTTP/2 and gRPC
// set per hop (the backend call gets its own).
func forwardedMetadata(header [][2]string) metadata.MD {
	out := make(metadata.MD, len(header))
	for _, kv := range header {
		if !perHopKey(kv[0]) {
			out[kv[0]] = append(out[kv[0]], kv[1])
		}
	}
	return out
}

// backendError passes the backend's status on; a failure to reach the
// backend at all is UNAVAILABLE, as for any unreachable server.
func backendError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, "Cancelled")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return deadlineStatus.Err()
	}
	return status.Errorf(codes.Unavailable, "fallback server: %v", err)
}
