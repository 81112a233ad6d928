package front

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// startBackend serves every method on a Unix socket with an echo stream
// handler that reports metadata back and ends with the status the client
// asks for (metadata "want-code").
func startBackend(t *testing.T, cancelled chan<- struct{}) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "backend.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		ss.SendHeader(metadata.Pairs("x-backend", "yes", "x-echo-bin", md.Get("x-in-bin")[0]))
		for {
			var m mem.BufferSlice
			err := ss.RecvMsg(&m)
			if err == io.EOF {
				break
			}
			if err != nil {
				if cancelled != nil {
					cancelled <- struct{}{}
				}
				return err
			}
			if err := ss.SendMsg(m); err != nil {
				return err
			}
		}
		ss.SetTrailer(metadata.Pairs("x-trailer", "t"))
		if c := md.Get("want-code"); len(c) > 0 {
			return status.Error(codes.FailedPrecondition, "backend says "+c[0])
		}
		return nil
	}))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return "unix://" + sock
}

func TestProxyBidiEchoCarriesMetadataAndStatus(t *testing.T) {
	target := startBackend(t, nil)
	_, cc := startFront(t, fmt.Sprintf(`, "fallback": %q`, target), echo)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-in-bin", "\x00\x01", "want-code", "no")
	s, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/any.Svc/Bidi")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		out := []byte(fmt.Sprint(i))
		if err := s.SendMsg(&out); err != nil {
			t.Fatal(err)
		}
		var in []byte
		if err := s.RecvMsg(&in); err != nil || string(in) != string(out) {
			t.Fatalf("ping %d: %q %v", i, in, err)
		}
	}
	s.CloseSend()
	var in []byte
	err = s.RecvMsg(&in)
	wantStatus(t, err, codes.FailedPrecondition, "backend says no")
	hdr, _ := s.Header()
	if hdr.Get("x-backend")[0] != "yes" || hdr.Get("x-echo-bin")[0] != "\x00\x01" || s.Trailer().Get("x-trailer")[0] != "t" {
		t.Fatalf("header %v trailer %v", hdr, s.Trailer())
	}
}

func TestProxyCancelReachesBackend(t *testing.T) {
	cancelled := make(chan struct{}, 1)
	target := startBackend(t, cancelled)
	f, cc := startFront(t, fmt.Sprintf(`, "fallback": %q`, target), echo)
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-in-bin", "x"))
	s, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/any.Svc/Bidi")
	if err != nil {
		t.Fatal(err)
	}
	out := []byte("one")
	s.SendMsg(&out)
	var in []byte
	if err := s.RecvMsg(&in); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend handler did not see the cancellation")
	}
	if metric(f, "calls_proxied") != 1 {
		t.Fatalf("calls_proxied = %d", metric(f, "calls_proxied"))
	}
}

func TestLookupCanRouteToFallback(t *testing.T) {
	target := startBackend(t, nil)
	_, cc := startFront(t, fmt.Sprintf(`, "fallback": %q, "resolve_unknown": true`, target), func(f *Front, e Event) {
		if e.Kind == EventLookup {
			f.Calls().Route(e.CallID, FallbackMethodID)
		}
	})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-in-bin", "x")
	in, out := []byte("via backend"), []byte(nil)
	if err := cc.Invoke(ctx, "/any.Svc/Unary", &in, &out); err != nil || string(out) != "via backend" {
		t.Fatalf("%q %v", out, err)
	}
}

// A fallback target that can't name a server is refused when the front is
// made, naming what is wrong; grpc-go's own targets pass.
func TestFallbackTargetChecked(t *testing.T) {
	for _, target := range []string{"127.0.0.1:50052", "localhost:1", "[::1]:65535", "unix:///tmp/s.sock", "unix:s.sock",
		"unix-abstract:name", "dns:///host:443", "passthrough:///x:1", "ipv4:127.0.0.1:1"} {
		if err := checkFallbackTarget(target); err != nil {
			t.Errorf("%q refused: %v", target, err)
		}
	}
	for target, want := range map[string]string{
		"localhost":             "not a server address",
		"http://localhost:8080": "not a server address",
		"localhost:http":        "is not a port number",
		"localhost:0":           "is not a port number",
		"localhost:70000":       "is not a port number",
	} {
		err := checkFallbackTarget(target)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", target, err, want)
		}
	}
	if _, err := New(&Config{Address: "127.0.0.1:0", Fallback: "localhost"}); err == nil || !strings.Contains(err.Error(), `fallback "localhost"`) {
		t.Errorf("New with fallback \"localhost\": %v, want an error naming it", err)
	}
}
