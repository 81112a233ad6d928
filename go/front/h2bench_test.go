package front

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"net"
	"testing"

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
			f := startConfigured(b, fmt.Sprintf(`{"address": "127.0.0.1:0", "methods": [[%q, false]],
				"options": [["grpc.pygrpc_native.transport", %q]]}`, sayPath, transport))
			serveEvents(b, f, func(f *Front, e Event) {
				if e.Kind == EventCall {
					e.Release()
					f.Calls().Respond(e.CallID, nil, true)
				}
			})
			c := dialRaw(b, f.Port())
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c.call(b)
			}
		})
	}
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

func (c *rawClient) call(b *testing.B) {
	id := c.id
	c.id += 2
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.header, EndHeaders: true})
	_ = c.fr.WriteData(id, true, emptyMessage)
	if err := c.w.Flush(); err != nil {
		b.Fatal(err)
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			b.Fatal(err)
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
			if f.StreamID == id && f.StreamEnded() {
				return
			}
		case *http2.RSTStreamFrame:
			b.Fatalf("stream %d reset: %v", f.StreamID, f.ErrCode)
		case *http2.GoAwayFrame:
			b.Fatalf("GOAWAY: %v", f.ErrCode)
		}
	}
}
