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
