package front

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	runtimemetrics "runtime/metrics"
	"slices"
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
			benchCalls(b, c)
		})
		// With a deadline, as grpcio's clients send one (timeout=).
		b.Run(transport+"-deadline", func(b *testing.B) {
			f := startBenchFront(b, transport)
			benchCalls(b, dialRawWith(b, f.Port(), timedRequestHeader))
		})
	}
}

// benchCalls makes b.N calls on c, one at a time.
func benchCalls(b *testing.B, c *rawClient) {
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		c.call(b)
	}
	reportCPU(b, cpu)
}

// TestUnaryCallAllocations holds the h2 transport to allocating nothing
// per unary call in steady state beyond the request handed over (empty
// here): under one allocation per call, averaged (the stream slab costs
// one per streamSlabSize calls). The whole process is counted: the front,
// the transport, the stand-in for Python and the raw client.
func TestUnaryCallAllocations(t *testing.T) {
	f := startBenchFront(t, TransportH2)
	c := dialRaw(t, f.Port())
	for i := 0; i < 200; i++ {
		c.call(t) // warm: the HPACK tables, buffers and event slices
	}
	n := testing.AllocsPerRun(800, func() { c.call(t) })
	t.Logf("%.3f allocations per call", n)
	if n >= 1 {
		t.Fatalf("%.2f allocations per unary call on h2; want under 1 (go test -run='^$' -bench='UnaryCall$/h2' -benchmem -memprofile ./go/front shows where)", n)
	}
}

// TestDeadlineCallStartsNoGoroutine: a unary call with a deadline starts no
// goroutine on h2, with bearer tokens (admit's context.WithValue) too. Its
// stream's deadline and its own (deadlineMargin earlier) are timers that
// the call's end stops, on contexts in the stream's memory
// (streamContext); contexts of the context package there ran their
// context.AfterFunc watches on a goroutine each at every call's end, and
// watched a context.WithValue of the stream's with a goroutine per call.
// With ordered=True, the ordering ticket's watch (for a call that ends
// before it is delivered) is unregistered once the call is delivered. The
// raw client starts none per call; the process is counted.
func TestDeadlineCallStartsNoGoroutine(t *testing.T) {
	for _, tc := range []struct{ name, config, token string }{
		{"plain", "", ""},
		{"bearer", `, "bearer_tokens": {"tok": "client-a"}`, "Bearer tok"},
		{"ordered", `, "ordered": true`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startBenchFrontWith(t, TransportH2, tc.config)
			request := timedRequestHeader
			if tc.token != "" {
				request = append(slices.Clip(request), hpack.HeaderField{Name: "authorization", Value: tc.token})
			}
			c := dialRawWith(t, f.Port(), request)
			for i := 0; i < 100; i++ {
				c.call(t)
			}
			const calls = 400
			before := goroutinesCreated()
			for i := 0; i < calls; i++ {
				c.call(t)
			}
			per := float64(goroutinesCreated()-before) / calls
			t.Logf("%.3f goroutines started per call", per)
			if per > 0.1 {
				t.Fatalf("%.2f goroutines started per unary call with a deadline; want none (a context.AfterFunc left registered at the call's end, or a context the context package must watch?)", per)
			}
		})
	}
}

// TestDeadlineCallAllocations: a deadline costs a unary call on h2 its two
// timers (each a time.Timer and its function), and nothing else.
func TestDeadlineCallAllocations(t *testing.T) {
	f := startBenchFront(t, TransportH2)
	c := dialRawWith(t, f.Port(), timedRequestHeader)
	for i := 0; i < 200; i++ {
		c.call(t)
	}
	n := testing.AllocsPerRun(800, func() { c.call(t) })
	t.Logf("%.3f allocations per call", n)
	if n >= 5 {
		t.Fatalf("%.2f allocations per unary call with a deadline on h2; want 4 (go test -run='^$' -bench='UnaryCall$/h2-deadline' -benchmem -memprofile ./go/front shows where)", n)
	}
}

// goroutinesCreated is how many goroutines the process has started so far.
func goroutinesCreated() uint64 {
	s := []runtimemetrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	runtimemetrics.Read(s)
	return s[0].Value.Uint64()
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
func startBenchFront(b testing.TB, transport string) *Front {
	return startBenchFrontWith(b, transport, "")
}

// startBenchFrontWith is startBenchFront with more configuration (JSON
// members, each after a comma).
func startBenchFrontWith(b testing.TB, transport, config string) *Front {
	f := startConfigured(b, fmt.Sprintf(`{"address": "127.0.0.1:0", "methods": [[%q, false]],
		"options": [["grpc.pygrpc_native.transport", %q]]%s}`, sayPath, transport, config))
	serveEvents(b, f, func(f *Front, e Event) {
		if e.Kind == EventCall {
			e.Release()
			f.Calls().Respond(e.CallID, nil, SendWait)
		}
	})
	return f
}

// rawClient is a minimal HTTP/2 gRPC client for benchmarks that allocates
// nothing per call, so that allocs/op is the server's: its HPACK encoder
// indexes the header fields as real clients (grpc-go's, grpcio's) do, so
// from the second call on the block is table references; it reads frames
// itself into one buffer; flow control is given back as it reads.
type rawClient struct {
	conn    net.Conn
	w       *bufio.Writer
	r       *bufio.Reader
	fr      *http2.Framer // for writing only
	id      uint32
	enc     *hpack.Encoder
	request []hpack.HeaderField // each call's header list
	header  bytes.Buffer        // the block being encoded
	head    [9]byte             // the frame header being read
	payload []byte              // the frame being read
	unack   uint32
}

// rawRequestHeader is the request's header list.
var rawRequestHeader = []hpack.HeaderField{
	{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: sayPath},
	{Name: ":authority", Value: "bench"}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
}

// timedRequestHeader is rawRequestHeader with a deadline 20 s away.
var timedRequestHeader = append(slices.Clip(rawRequestHeader), hpack.HeaderField{Name: "grpc-timeout", Value: "20S"})

func dialRaw(b testing.TB, port int) *rawClient { return dialRawWith(b, port, rawRequestHeader) }

// dialRawWith is dialRaw whose calls send request as their header list.
func dialRawWith(b testing.TB, port int, request []hpack.HeaderField) *rawClient {
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	c := &rawClient{conn: conn, w: bufio.NewWriter(conn), r: bufio.NewReader(conn), id: 1, request: request, payload: make([]byte, 1<<14)}
	c.fr = http2.NewFramer(c.w, nil)
	c.enc = hpack.NewEncoder(&c.header)
	c.w.WriteString(http2.ClientPreface)
	_ = c.fr.WriteSettings()
	_ = c.fr.WriteWindowUpdate(0, math.MaxInt32-65535)
	_ = c.w.Flush()
	return c
}

var emptyMessage = []byte{0, 0, 0, 0, 0}

func (c *rawClient) call(b testing.TB) { c.calls(b, 1) }

// calls sends n calls at once and reads until every one has ended.
func (c *rawClient) calls(b testing.TB, n int) {
	for i := 0; i < n; i++ {
		id := c.id + uint32(2*i)
		c.header.Reset()
		for _, f := range c.request {
			_ = c.enc.WriteField(f)
		}
		_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.header.Bytes(), EndHeaders: true})
		_ = c.fr.WriteData(id, true, emptyMessage)
	}
	c.id += uint32(2 * n)
	if err := c.w.Flush(); err != nil {
		b.Error(err)
		return
	}
	head := c.head[:]
	for left := n; left > 0; {
		if _, err := io.ReadFull(c.r, head); err != nil {
			b.Error(err)
			return
		}
		length := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
		kind, flags := http2.FrameType(head[3]), http2.Flags(head[4])
		stream := binary.BigEndian.Uint32(head[5:]) & (1<<31 - 1)
		if length > len(c.payload) {
			c.payload = make([]byte, length)
		}
		payload := c.payload[:length]
		if _, err := io.ReadFull(c.r, payload); err != nil {
			b.Error(err)
			return
		}
		switch kind {
		case http2.FrameSettings:
			if !flags.Has(http2.FlagSettingsAck) {
				_ = c.fr.WriteSettingsAck()
				_ = c.w.Flush()
			}
		case http2.FramePing:
			if !flags.Has(http2.FlagPingAck) {
				_ = c.fr.WritePing(true, [8]byte(payload))
				_ = c.w.Flush()
			}
		case http2.FrameData:
			if c.unack += uint32(length); c.unack > 1<<20 {
				_ = c.fr.WriteWindowUpdate(0, c.unack)
				_ = c.w.Flush()
				c.unack = 0
			}
		case http2.FrameHeaders:
			if flags.Has(http2.FlagHeadersEndStream) {
				left--
			}
		case http2.FrameRSTStream:
			b.Errorf("stream %d reset: %v", stream, http2.ErrCode(binary.BigEndian.Uint32(payload)))
			return
		case http2.FrameGoAway:
			b.Errorf("GOAWAY: %v", http2.ErrCode(binary.BigEndian.Uint32(payload[4:])))
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
