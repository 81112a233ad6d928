package front

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// goneStream is a streaming call whose first send finds the call gone from
// the wire while its context still looks live, as grpc-go's transport
// reports a stream it has marked done but not yet cancelled.
type goneStream struct {
	ServerStream // nil: what the test doesn't reach
	ctx          context.Context
}

func (g *goneStream) Context() context.Context          { return g.ctx }
func (g *goneStream) Method() string                    { return countPath }
func (g *goneStream) Header() [][2]string               { return nil }
func (g *goneStream) Conn() *connState                  { return nil }
func (g *goneStream) Security() *ConnSecurity           { return nil }
func (g *goneStream) ClientCompressors() []string       { return nil }
func (g *goneStream) SendCompressor() string            { return "" }
func (g *goneStream) SetCompressor(string)              {}
func (g *goneStream) Request() (mem.BufferSlice, error) { return msg("req"), nil }
func (g *goneStream) Flush()                            {}
func (g *goneStream) SendMessage(b mem.BufferSlice, _ bool) error {
	b.Free()
	return errStreamGone
}

// A send that finds the call gone ends it as cancelled, and Python hears
// so (EventCancel), even while the call's context hasn't ended yet.
func TestASendToAGoneStreamTellsPython(t *testing.T) {
	f := startConfigured(t, fmt.Sprintf(`{"address": "127.0.0.1:0", "methods": [[%q, false], [%q, true]]}`, sayPath, countPath))
	t.Cleanup(func() { f.Stop(-1) })
	served := make(chan error, 1)
	go func() { served <- f.handler.serve(&goneStream{ctx: context.Background()}) }()
	evs, _ := f.Events().Recv(1, 1<<20, 5*time.Second)
	if len(evs) != 1 || evs[0].Kind != EventCall {
		t.Fatalf("events %+v, want the call", evs)
	}
	id := evs[0].CallID
	f.Calls().Send(id, msg("m"), SendWait)
	if err := <-served; status.Code(err) != codes.Canceled {
		t.Fatalf("serve: %v, want CANCELLED", err)
	}
	evs, _ = f.Events().Recv(1, 1<<20, 5*time.Second)
	if len(evs) != 1 || evs[0].Kind != EventCancel || evs[0].CallID != id {
		t.Fatalf("events %+v, want the call's EventCancel", evs)
	}
	if got := f.m.callsCancelled.Load(); got != 1 {
		t.Fatalf("calls_cancelled %d, want 1", got)
	}
}

// grpc-go's transport reports a gone stream as a status; only the statuses
// it decides on a message stay verdicts for the client.
func TestGrpcgoSendErrorsSayWhetherTheStreamIsGone(t *testing.T) {
	for _, c := range []struct {
		err  error
		gone bool
	}{
		{status.Error(codes.Canceled, "context canceled"), true},
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), true},
		{status.Error(codes.Unavailable, "transport is closing"), true},
		{status.Error(codes.ResourceExhausted, "too large"), false},
		{status.Error(codes.Internal, "grpc: error while compressing"), false},
		{nil, false},
	} {
		if got := streamGone(c.err) == errStreamGone; got != c.gone {
			t.Errorf("%v: gone %v, want %v", c.err, got, c.gone)
		}
	}
}
