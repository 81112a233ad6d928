package front

import (
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestStopAfterVanishedHandshakes: clients that reset their connection
// right after their preface and SETTINGS, so that the server's answer to
// them fails to write, don't hold Stop up (on h2 that failed write once
// closed the connection while the SETTINGS handler held its lock: every
// such connection deadlocked, and so did Stop).
func TestStopAfterVanishedHandshakes(t *testing.T) {
	f := startConfigured(t, `{"address": "127.0.0.1:0", "methods": [["/v.V/Say", false]]}`)
	settings := []byte{0, 0, 0, byte(http2.FrameSettings), 0, 0, 0, 0, 0}
	for i := 0; i < 100; i++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", f.Port()))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write(append([]byte(http2.ClientPreface), settings...))
		_ = c.(*net.TCPConn).SetLinger(0) // close with a reset
		_ = c.Close()
	}
	time.Sleep(200 * time.Millisecond)
	done := make(chan struct{})
	go func() {
		f.Stop(-1)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop still waiting 10 s after clients vanished in their handshake")
	}
}

// TestStopWithAStalledHandshake: a client that connects and sends nothing
// (or half a preface) doesn't hold a stop past its grace, on either
// transport. grpc-go's server waited for such a connection until its
// handshake timeout (120 s), whatever the grace, Stop(-1) included;
// grpcio's stop(1) returns after 1 s.
func TestStopWithAStalledHandshake(t *testing.T) {
	for _, transport := range []string{TransportH2, TransportGRPCGo} {
		t.Run(transport, func(t *testing.T) {
			f := startConfigured(t, fmt.Sprintf(`{"address": "127.0.0.1:0", "methods": [["/v.V/Say", false]], "options": [["grpc.pygrpc_native.transport", %q]]}`, transport))
			for _, first := range []string{"", http2.ClientPreface[:10]} {
				c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", f.Port()))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				_, _ = c.Write([]byte(first))
			}
			time.Sleep(100 * time.Millisecond)
			start := time.Now()
			done := make(chan struct{})
			go func() {
				f.Stop(200 * time.Millisecond)
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Stop(200ms) still waiting 5 s after it began, for clients stalled in their handshake")
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("Stop(200ms) took %v", took)
			}
		})
	}
}
