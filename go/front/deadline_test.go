package front

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
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
	deadlineMargin = -time.Hour                  // the front never ends a call first
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

// TestNoAnswerAfterIsActiveSaysEnded: once IsActive has told Python that a
// call is over (its deadline, less deadlineMargin, has passed), an answer
// sent after that does not reach the client, even while what acts on the
// end (opQueue.abandon, run by the call's deadline timer just after it
// ends the context) hasn't run yet: the client gets DEADLINE_EXCEEDED, as
// from grpcio's server once is_active() is False. Here the timer is
// stopped and the context ended as it would end it, so only the answer's
// own driver can act on the end (before the fix the client got the
// answer, OK); the reliability suite's storm lost the same race once in a
// CI run.
func TestNoAnswerAfterIsActiveSaysEnded(t *testing.T) {
	hooked := make(chan bool, 1)
	_, cc := startFront(t, `, "options": [["grpc.pygrpc_native.transport", "h2"]]`, func(f *Front, e Event) {
		if e.Kind != EventCall {
			return
		}
		c, _ := f.Calls().table.lookup(e.CallID)
		// A driven call with a deadline of its own, watched by its timer.
		hooked <- c.ops.driver != nil && c.ownsDeadline() && c.unwatchEnd()
		c.own.cancel(context.DeadlineExceeded)
		if active, _ := f.Calls().IsActive(e.CallID); active {
			t.Error("IsActive says active once the call's context has ended")
		}
		f.Calls().Respond(e.CallID, msg("too late"), SendNoWait)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := say(ctx, cc, "x")
	if !<-hooked {
		t.Fatal("the call was not driven with a deadline timer to hold off")
	}
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a call answered after IsActive said it ended: %v, want DEADLINE_EXCEEDED", err)
	}
}

// A call that ended before Python answered it keeps its details for a
// handler still running, as grpcio's context still answers: the metadata,
// the peer and the time left.
func TestDetailsOfACallThatEndedUnanswered(t *testing.T) {
	for _, byDeadline := range []bool{false, true} {
		t.Run(fmt.Sprintf("byDeadline=%v", byDeadline), func(t *testing.T) {
			called, ended := make(chan struct{}), make(chan uint64, 1)
			f, cc := startFront(t, "", func(f *Front, e Event) {
				switch e.Kind {
				case EventCall:
					close(called)
				case EventCancel:
					ended <- e.CallID
				}
				e.Release()
			})
			// Connected first, and cancelled once Python has the call: on
			// a loaded machine, setting up the connection can take longer
			// than a short deadline (and a call the client gave up before
			// sending never reaches the server).
			waitReady(t, cc)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if byDeadline {
				// Long enough for Python to take the call before the front
				// ends it (deadlineMargin early) on a loaded machine: a call
				// ended unseen gets no EventCancel.
				ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
			} else {
				go func() {
					select {
					case <-called:
					case <-time.After(5 * time.Second):
					}
					cancel()
				}()
			}
			defer cancel()
			_, _ = say(metadata.AppendToOutgoingContext(ctx, "x-who", "me"), cc, "hi")
			var id uint64
			select {
			case id = <-ended:
			case <-time.After(5 * time.Second):
				t.Fatal("no EventCancel")
			}
			d, r := f.Calls().Details(id)
			if r != ResultOK {
				t.Fatalf("Details of an ended call: %v", r)
			}
			if fmt.Sprint(d.Metadata) != "[[user-agent "+d.Metadata[0][1]+"] [x-who me]]" || !d.HasDeadline {
				t.Fatalf("details %+v", d)
			}
			// By deadline, the client's own timer (it sends RST_STREAM) may
			// fire a little before the server's, which started later: the
			// time left is then a few microseconds, not zero, as on grpcio.
			if d.Peer == "" || (byDeadline && d.TimeRemaining > 50*time.Millisecond) || (!byDeadline && d.TimeRemaining < time.Second) {
				t.Fatalf("peer %q, time left %v", d.Peer, d.TimeRemaining)
			}
		})
	}
}

// TestParseTimeoutAsGRPCCore: grpc-timeout values read as grpc-core reads
// them (spaces around the number and the unit, more than the spec's 8
// digits, a number over a billion meaning no deadline, microseconds and
// nanoseconds rounded up to milliseconds); grpcio's server serves such
// calls, and ours answered INTERNAL (or, for 1n, DEADLINE_EXCEEDED).
func TestParseTimeoutAsGRPCCore(t *testing.T) {
	const none = time.Duration(1<<63 - 1)
	for v, want := range map[string]time.Duration{
		"5S":                       5 * time.Second,
		" 5S":                      5 * time.Second,
		"5 S":                      5 * time.Second,
		"5S ":                      5 * time.Second,
		"00000001m":                time.Millisecond,
		"100000000S":               100000000 * time.Second,
		"1000000000n":              time.Second,
		"1n":                       time.Millisecond,
		"500u":                     time.Millisecond,
		"1001u":                    2 * time.Millisecond,
		"0n":                       0,
		"1000000001n":              none,
		"99999999999999999999999S": none,
		"99999999H":                none,
	} {
		if got, err := parseTimeout(v); err != nil || got != want {
			t.Errorf("parseTimeout(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "S", " ", "+5S", "-1S", "5", "5s", "5x", "\t5S", "5S5", "5 S x", "0x5S"} {
		if got, err := parseTimeout(v); err == nil {
			t.Errorf("parseTimeout(%q) = %v; want an error", v, got)
		}
	}
}
