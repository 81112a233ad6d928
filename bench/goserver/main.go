// Command goserver is a plain grpc-go echo server for /echo.Echo/Say (unary),
// /echo.Echo/Count (server streaming: the request is N as 4 big-endian bytes
// then a body, sent back N times), /echo.Echo/Collect (client streaming: the
// last request message comes back) and /echo.Echo/Chat (bidi: every message
// comes back as it arrives) with a raw-bytes codec: the reference for the
// pygrpc-native benchmarks (what grpc-go alone does on the same machine, with
// no Python at all).
//
// It follows the benchmark server protocol: listens on a loopback address,
// prints "PORT <n>" once serving, and stops gracefully on SIGTERM or SIGINT.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("goserver codec: cannot marshal %T", v)
	}
	if len(*b) == 0 {
		return nil, nil
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("goserver codec: cannot unmarshal into %T", v)
	}
	*b = data.Materialize()
	return nil
}

func say(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	var b []byte
	if err := dec(&b); err != nil {
		return nil, err
	}
	return &b, nil
}

func count(_ any, ss grpc.ServerStream) error {
	var req []byte
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	if len(req) < 4 {
		return status.Error(codes.InvalidArgument, "the request must start with a 4-byte count")
	}
	n := binary.BigEndian.Uint32(req)
	body := req[4:]
	for i := uint32(0); i < n; i++ {
		if err := ss.SendMsg(&body); err != nil {
			return err
		}
	}
	return nil
}

// collect reads the request stream to the client's half-close and sends
// back the last message (an empty one if there was none).
func collect(_ any, ss grpc.ServerStream) error {
	var last []byte
	for {
		var msg []byte
		if err := ss.RecvMsg(&msg); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		last = msg
	}
	return ss.SendMsg(&last)
}

// chat sends every request message back as it arrives, and ends OK at the
// client's half-close.
func chat(_ any, ss grpc.ServerStream) error {
	for {
		var msg []byte
		if err := ss.RecvMsg(&msg); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := ss.SendMsg(&msg); err != nil {
			return err
		}
	}
}

var echoService = grpc.ServiceDesc{
	ServiceName: "echo.Echo",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Say", Handler: say}},
	Streams: []grpc.StreamDesc{
		{StreamName: "Count", Handler: count, ServerStreams: true},
		{StreamName: "Collect", Handler: collect, ClientStreams: true},
		{StreamName: "Chat", Handler: chat, ServerStreams: true, ClientStreams: true},
	},
}

func main() {
	host := flag.String("host", "127.0.0.1", "loopback address to listen on")
	port := flag.Int("port", 0, "port (0: pick a free one)")
	grace := flag.Duration("grace", time.Second, "how long to let calls finish on SIGTERM")
	// tests/reliability sets the front's default (1024) so that h2spec's
	// concurrent-stream cases run against both (without a limit it skips them).
	maxStreams := flag.Uint("max-concurrent-streams", 0, "SETTINGS_MAX_CONCURRENT_STREAMS (0: grpc-go's default, no limit)")
	flag.Parse()
	if ip := net.ParseIP(*host); *host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		fmt.Fprintf(os.Stderr, "goserver: refusing to listen on %q: loopback only\n", *host)
		os.Exit(2)
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(*host, fmt.Sprint(*port)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "goserver:", err)
		os.Exit(1)
	}
	opts := []grpc.ServerOption{grpc.ForceServerCodecV2(rawCodec{})}
	if *maxStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(*maxStreams)))
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&echoService, struct{}{})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	fmt.Printf("PORT %d\n", lis.Addr().(*net.TCPAddr).Port)
	os.Stdout.Sync()

	select {
	case err := <-served:
		fmt.Fprintln(os.Stderr, "goserver:", err)
		os.Exit(1)
	case <-sigs:
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(*grace):
		srv.Stop()
	}
}
