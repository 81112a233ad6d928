package front

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestIdleConnectionClosedAfterItsLastCall: with max_connection_idle, a
// connection still busy when its first idle period runs out gets its
// GOAWAY one period after its last call ends, not before that call ends
// and not never. The timer goroutine isn't woken when a call ends (that
// cost every call a wake-up): it looks again one period after finding the
// connection busy, so this is the case that breaks if that look is lost.
func TestIdleConnectionClosedAfterItsLastCall(t *testing.T) {
	const idle = 300 * time.Millisecond
	const hold = 450 * time.Millisecond // past the first idle period
	f, _ := startFront(t, `, "options": [["grpc.pygrpc_native.transport", "h2"], ["grpc.max_connection_idle_ms", 300]]`,
		func(f *Front, e Event) {
			if e.Kind == EventCall {
				time.AfterFunc(hold, func() { f.Calls().Respond(e.CallID, msg("late"), false) })
			}
		})
	conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(f.Port())))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(append([]byte(clientPreface), frame(0x4, 0, 0, nil)...)); err != nil {
		t.Fatal(err)
	}
	frames := make(chan string, 64)
	go readFrames(conn, frames)
	write(frame(fHeaders, flagEndHeaders, 1, blockWith()), frame(fData, flagEndStream, 1, grpcMessage("x")))(conn)
	var answered time.Time
	deadline := time.After(3 * time.Second)
	for {
		select {
		case line, ok := <-frames:
			if !ok {
				t.Fatal("the connection closed without a GOAWAY")
			}
			if strings.HasPrefix(line, "1 HEADERS") && strings.HasSuffix(line, "END_STREAM") {
				answered = time.Now()
			}
			if !strings.Contains(line, "GOAWAY") {
				continue
			}
			if answered.IsZero() {
				t.Fatalf("GOAWAY (%q) while the call was still running", line)
			}
			if after := time.Since(answered); after < idle-50*time.Millisecond || after > idle+400*time.Millisecond {
				t.Fatalf("GOAWAY %v after the last call ended, want about %v", after, idle)
			}
			return
		case <-deadline:
			t.Fatalf("no GOAWAY within 3 s (answered: %v)", !answered.IsZero())
		}
	}
}
