package front

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// BenchmarkUnaryCall is one empty unary call through each transport,
// answered by a stand-in for Python that responds to every EventCall with
// an empty message. The client is a raw HTTP/2 client that allocates
// nothing per call, so allocs/op is the server's (the front, the transport
// and the stand-in's event batches):
//
//	go test -run='^$' -bench=UnaryCall -benchmem ./go/front
func BenchmarkUnaryCall(b *testing.B) {
	for _, transport := range []string{TransportGRPCGo, TransportH2} {
		b.Run(transport, func(b *testing.B) {
			f := startBenchFront(b, transport)
			c := dialRaw(b, f.Port())
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for i := 0; i < b.N; i++ {
				c.call(b)
			}
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkUnaryCallLoaded is BenchmarkUnaryCall under load: 4
// connections, each sending calls 32 at a time, as bench/loadgen does; ns/op
// is wall time per call with every core busy, so it tracks CPU per call.
func BenchmarkUnaryCallLoaded(b *testing.B) {
	for _, transport := range []string{TransportGRPCGo, TransportH2} {
		b.Run(transport, func(b *testing.B) {
			f := startBenchFront(b, transport)
			const conns, inFlight = 4, 32
			clients := make([]*rawClient, conns)
			for i := range clients {
				clients[i] = dialRaw(b, f.Port())
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			done := make(chan struct{})
			for _, c := range clients {
				go func() {
					defer func() { done <- struct{}{} }()
					for n := 0; n < b.N/conns; n += inFlight {
						c.calls(b, inFlight)
					}
				}()
			}
			for range clients {
				<-done
			}
			reportCPU(b, cpu)
		})
	}
}

// startBenchFront is a front on transport whose stand-in for Python
// answers every EventCall with an empty message.
func startBenchFront(b *testing.B, transport string) *Front {
	f := startConfigured(b, fmt.Sprintf(`{"address": "127.0.0.1:0", "methods": [[%q, false]],
		"options": [["grpc.pygrpc_native.transport", %q]]}`, sayPath, transport))
	serveEvents(b, f, func(f *Front, e Event) {
		if e.Kind == EventCall {
			e.Release()
			f.Calls().Respond(e.CallID, nil, true)
		}
	})
	return f
}

// rawClient is a minimal HTTP/2 gRPC client for benchmarks: one call at a
// time, a pre-encoded header block, flow control given back as it reads.
type rawClient struct {
	conn   net.Conn
	w      *bufio.Writer
	fr     *http2.Framer
	id     uint32
	header []byte
	unack  uint32
}

func dialRaw(b *testing.B, port int) *rawClient {
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	c := &rawClient{conn: conn, w: bufio.NewWriter(conn), id: 1}
	c.fr = http2.NewFramer(c.w, bufio.NewReader(conn))
	c.fr.SetReuseFrames()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", sayPath},
		{":authority", "bench"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: true}) // never indexed: the block can be resent as is
	}
	c.header = hb.Bytes()
	c.w.WriteString(http2.ClientPreface)
	_ = c.fr.WriteSettings()
	_ = c.fr.WriteWindowUpdate(0, math.MaxInt32-65535)
	_ = c.w.Flush()
	return c
}

var emptyMessage = []byte{0, 0, 0, 0, 0}

func (c *rawClient) call(b *testing.B) { c.calls(b, 1) }

// calls sends n calls at once and reads until every one has ended.
func (c *rawClient) calls(b *testing.B, n int) {
	for i := 0; i < n; i++ {
		id := c.id + uint32(2*i)
		_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.header, EndHeaders: true})
		_ = c.fr.WriteData(id, true, emptyMessage)
	}
	c.id += uint32(2 * n)
	if err := c.w.Flush(); err != nil {
		b.Error(err)
		return
	}
	for left := n; left > 0; {
		f, err := c.fr.ReadFrame()
		if err != nil {
			b.Error(err)
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = c.fr.WriteSettingsAck()
				_ = c.w.Flush()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = c.fr.WritePing(true, f.Data)
				_ = c.w.Flush()
			}
		case *http2.DataFrame:
			if c.unack += f.Length; c.unack > 1<<20 {
				_ = c.fr.WriteWindowUpdate(0, c.unack)
				_ = c.w.Flush()
				c.unack = 0
			}
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				left--
			}
		case *http2.RSTStreamFrame:
			b.Errorf("stream %d reset: %v", f.StreamID, f.ErrCode)
			return
		case *http2.GoAwayFrame:
			b.Errorf("GOAWAY: %v", f.ErrCode)
			return
		}
	}
}

// processCPU is the CPU time the process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per call since start (server
// and raw client together): steadier than ns/op on a shared machine.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
}
