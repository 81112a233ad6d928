package front

import (
	"net"
	"strconv"
	"testing"
	"time"
)

// TestLateFrontEndIsStillADeadline: on h2, a call whose deadline passes on
// the wire ends with status DEADLINE_EXCEEDED, as grpcio's server ends it,
// even when the front's own end (deadlineMargin before the deadline) comes
// late, as it can on a loaded machine, and when the request never came in
// full. A CANCEL reset there reaches a client whose own timer hasn't fired
// yet as CANCELLED. (grpc-go's transport resets such a call with CANCEL:
// the front can't change that.)
func TestLateFrontEndIsStillADeadline(t *testing.T) {
	saved := deadlineMargin
	t.Cleanup(func() { deadlineMargin = saved }) // after the front's own cleanup
	deadlineMargin = -time.Hour                   // the front never ends a call first
	f, _ := startFront(t, `, "options": [["grpc.pygrpc_native.transport", "h2"]]`, func(*Front, Event) {})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(f.Port()))
	timeout := [2]string{"grpc-timeout", "100m"}
	const want = "stream 1: HEADERS :status=200 content-type=application/grpc grpc-status=4 END_STREAM"
	for _, sc := range []scenario{
		{name: "unary call never answered", send: write(
			frame(fHeaders, flagEndHeaders, 1, blockWith(timeout)),
			frame(fData, flagEndStream, 1, grpcMessage("x")))},
		{name: "server stream never answered", send: write(
			frame(fHeaders, flagEndHeaders, 1, append(requestBlock(countPath), literal(timeout[0], timeout[1])...)),
			frame(fData, flagEndStream, 1, grpcMessage("x")))},
		{name: "request never finished", send: write(
			frame(fHeaders, flagEndHeaders, 1, blockWith(timeout)))},
	} {
		sc.quiet = time.Second
		got := transcript(t, addr, sc)
		if len(got) != 2 || got[1] != want {
			t.Errorf("%s: got %q, want %q", sc.name, got, want)
		}
	}
}
