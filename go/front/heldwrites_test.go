package front

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

const onH2 = `, "options": [["grpc.pygrpc_native.transport", "h2"]]`

// heldCalls starts an h2 front whose calls arrive on the returned channel,
// and n unary calls on one connection, whose outcomes arrive on the other.
func heldCalls(t *testing.T, n int) (*Front, chan Event, chan error) {
	t.Helper()
	calls := make(chan Event, n)
	f, cc := startFront(t, onH2, func(f *Front, e Event) {
		if e.Kind == EventCall {
			calls <- e
		}
	})
	outcomes := make(chan error, n)
	for range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := say(ctx, cc, "q")
			outcomes <- err
		}()
	}
	return f, calls, outcomes
}

// An event loop's answers (SendHeld) wait in their connection until the
// loop flushes them (FlushHeld), and then all leave.
func TestHeldAnswersLeaveAtFlushHeld(t *testing.T) {
	f, calls, outcomes := heldCalls(t, 3)
	for range 3 {
		e := <-calls
		if r := f.Calls().Respond(e.CallID, msg("held"), SendHeld); r != ResultOK {
			t.Fatalf("Respond: %v", r)
		}
	}
	select {
	case err := <-outcomes:
		t.Fatalf("an answer left before FlushHeld (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	f.Calls().FlushHeld()
	for range 3 {
		select {
		case err := <-outcomes:
			if err != nil {
				t.Fatalf("call: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("FlushHeld wrote nothing")
		}
	}
}

// A front that stops, even at once, writes out what an event loop held
// first: its calls get their answers, not the closed connection's
// UNAVAILABLE.
func TestHeldAnswersLeaveWhenTheFrontStops(t *testing.T) {
	f, calls, outcomes := heldCalls(t, 1)
	e := <-calls
	if r, err := f.Calls().Finish(e.CallID, Ending{Code: codes.NotFound, Details: "held"}, SendHeld); r != ResultOK || err != nil {
		t.Fatalf("Finish: %v %v", r, err)
	}
	f.BeginStop(-1)
	select {
	case err := <-outcomes:
		wantStatus(t, err, codes.NotFound, "held")
	case <-time.After(5 * time.Second):
		t.Fatal("the held status never left")
	}
}

// Held or not is per send: a thread's answer on a connection with held
// frames is written at once, and takes the held ones along.
func TestThreadAnswerTakesHeldFramesAlong(t *testing.T) {
	f, calls, outcomes := heldCalls(t, 2)
	first, second := <-calls, <-calls
	if r := f.Calls().Respond(first.CallID, msg("held"), SendHeld); r != ResultOK {
		t.Fatalf("Respond: %v", r)
	}
	if r := f.Calls().Respond(second.CallID, msg("now"), SendNoWait); r != ResultOK {
		t.Fatalf("Respond: %v", r)
	}
	for range 2 {
		select {
		case err := <-outcomes:
			if err != nil {
				t.Fatalf("call: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("an answer waited for FlushHeld behind a thread's write")
		}
	}
	f.Calls().FlushHeld() // nothing left to write: a no-op
}
