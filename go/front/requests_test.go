package front

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

const (
	collectPath = "/echo.Echo/Collect" // client streaming
	chatPath    = "/echo.Echo/Chat"    // bidi
)

var (
	collectDesc = &grpc.StreamDesc{ClientStreams: true}
	chatDesc    = &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
)

// streamingFront is a front serving Collect (method 0) and Chat (method 1),
// whose events go to handle, and a client connection to it.
func streamingFront(t *testing.T, extra string, handle func(f *Front, e Event)) (*Front, *grpc.ClientConn) {
	t.Helper()
	f := startConfigured(t, fmt.Sprintf(`{"address": "127.0.0.1:0", "methods": [[%q, false, true], [%q, true, true]]%s}`, collectPath, chatPath, extra))
	cc := dial(t, f)
	serveEvents(t, f, handle)
	return f, cc
}

func mustGrant(t *testing.T, r Result, err error) {
	t.Helper()
	if err != nil || (r != ResultOK && r != ResultEnded) {
		t.Errorf("RequestMessages: %v %v", r, err)
	}
}

func send(t *testing.T, cs grpc.ClientStream, s string) {
	t.Helper()
	b := []byte(s)
	if err := cs.SendMsg(&b); err != nil {
		t.Fatal(err)
	}
}

func TestRequestStreamAsEventsWithCredit(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	_, cc := streamingFront(t, "", func(f *Front, e Event) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Kind {
		case EventCall:
			if e.HasPayload() {
				t.Error("a client-streaming call's EventCall carries no request")
			}
			r, err := f.Calls().RequestMessages(e.CallID, 1)
			mustGrant(t, r, err)
		case EventMessage:
			seen = append(seen, string(e.Bytes()))
			e.Release()
			r, err := f.Calls().RequestMessages(e.CallID, 1)
			mustGrant(t, r, err)
		case EventHalfClose:
			seen = append(seen, "EOF")
			f.Calls().Respond(e.CallID, msg(fmt.Sprint(len(seen))), SendWait)
		}
	})
	cs, err := cc.NewStream(context.Background(), collectDesc, collectPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"a", "b", "c"} {
		send(t, cs, m)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var out []byte
	if err := cs.RecvMsg(&out); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != "[a b c EOF]" || string(out) != "4" {
		t.Fatalf("events %v, reply %q", seen, out)
	}
}

func TestRequestStreamWithoutCreditHoldsTheClientBack(t *testing.T) {
	var messages atomic.Int32
	_, cc := streamingFront(t, "", func(f *Front, e Event) {
		if e.Kind == EventMessage {
			messages.Add(1)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := cc.NewStream(ctx, chatDesc, chatPath)
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int32
	big := make([]byte, 64<<10)
	go func() {
		for cs.SendMsg(&big) == nil {
			sent.Add(1)
		}
	}()
	time.Sleep(500 * time.Millisecond)
	// HTTP/2 windows (stream and connection) and socket buffers hold a few
	// MiB at most; nothing reached Python without credit.
	if n := sent.Load(); n > 64 {
		t.Fatalf("the client sent %d messages of 64 KiB with no credit given", n)
	}
	if n := messages.Load(); n != 0 {
		t.Fatalf("%d messages delivered without credit", n)
	}
}

func TestRequestStreamPulled(t *testing.T) {
	calls := make(chan Event, 1)
	f, cc := streamingFront(t, "", func(f *Front, e Event) {
		if e.Kind == EventCall {
			calls <- e
		}
	})
	cs, err := cc.NewStream(context.Background(), chatDesc, chatPath)
	if err != nil {
		t.Fatal(err)
	}
	send(t, cs, "ping")
	c := <-calls
	b, eof, r, err := f.Calls().ReadWait(c.CallID)
	if err != nil || r != ResultOK || eof || string(b.Materialize()) != "ping" {
		t.Fatalf("Read: %q %v %v %v", b.Materialize(), eof, r, err)
	}
	if _, err := f.Calls().RequestMessages(c.CallID, 1); err == nil {
		t.Fatal("events and pulls mixed on one call")
	}
	if _, _, r, _ := f.Calls().Read(c.CallID, nil); r != ResultWouldBlock {
		t.Fatalf("a read with nothing there: %v", r)
	}
	f.Calls().Send(c.CallID, msg("pong"), SendWait)
	var out []byte
	if err := cs.RecvMsg(&out); err != nil || string(out) != "pong" {
		t.Fatalf("%q %v", out, err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the end, read twice
		if _, eof, r, err := f.Calls().ReadWait(c.CallID); !eof || r != ResultOK || err != nil {
			t.Fatalf("after the half-close: %v %v %v", eof, r, err)
		}
	}
	f.Calls().Finish(c.CallID, Ending{Code: codes.OK}, SendWait)
	if err := cs.RecvMsg(&out); err != io.EOF {
		t.Fatal(err)
	}
	if _, _, r, _ := f.Calls().ReadWait(c.CallID); r != ResultEnded {
		t.Fatalf("a read after the end: %v", r)
	}
}

func TestRequestStreamMisuse(t *testing.T) {
	calls := make(chan Event, 1)
	f, cc := newFront(t, "")
	go func() {
		batch, _ := f.Events().Recv(1, math.MaxInt, -1)
		calls <- batch[0]
	}()
	go func() { _, _ = say(context.Background(), cc, "unary") }()
	c := <-calls
	if _, err := f.Calls().RequestMessages(c.CallID, 1); err == nil {
		t.Fatal("credit for a unary request")
	}
	if _, _, _, err := f.Calls().Read(c.CallID, nil); err == nil {
		t.Fatal("a read of a unary request")
	}
	if _, err := f.Calls().RequestMessages(c.CallID, 0); err == nil {
		t.Fatal("a credit of 0")
	}
	f.Calls().Respond(c.CallID, nil, SendWait)
}

func TestOversizedRequestMessageEndsTheCall(t *testing.T) {
	cancels := make(chan Event, 1)
	_, cc := streamingFront(t, `, "options": [["grpc.max_receive_message_length", 1024]]`, func(f *Front, e Event) {
		switch e.Kind {
		case EventCall, EventMessage:
			e.Release()
			r, err := f.Calls().RequestMessages(e.CallID, 1)
			mustGrant(t, r, err)
		case EventCancel:
			cancels <- e
		}
	})
	cs, err := cc.NewStream(context.Background(), chatDesc, chatPath)
	if err != nil {
		t.Fatal(err)
	}
	send(t, cs, "small")
	big := make([]byte, 2048)
	_ = cs.SendMsg(&big)
	var out []byte
	wantStatus(t, cs.RecvMsg(&out), codes.ResourceExhausted, "")
	select {
	case <-cancels:
	case <-time.After(5 * time.Second):
		t.Fatal("Python was not told that the call ended")
	}
}

// With hold_refusals, a refused message reaches Python as the stream's end
// after the messages before it, and the call ends with its status only
// when Python asks past it (a handler reading it, as on grpcio); a handler
// that answers first answers as usual.
func TestHeldRefusalEndsTheCallWhenAskedPastIt(t *testing.T) {
	if os.Getenv(transportEnv) == TransportGRPCGo {
		t.Skip("grpc-go's transport ends the call itself when it meets the message (README: known differences)")
	}
	for _, askPast := range []bool{true, false} {
		t.Run(fmt.Sprintf("askPast=%v", askPast), func(t *testing.T) {
			asked := make(chan Result, 1)
			_, cc := streamingFront(t, `, "hold_refusals": true, "options": [["grpc.max_receive_message_length", 1024]]`, func(f *Front, e Event) {
				switch e.Kind {
				case EventCall:
					r, err := f.Calls().RequestMessages(e.CallID, 8)
					mustGrant(t, r, err)
				case EventMessage:
					f.Calls().Send(e.CallID, msg("echo "+string(e.Bytes())), SendWait)
					e.Release()
				case EventHalfClose:
					if !askPast {
						f.Calls().Finish(e.CallID, Ending{Code: codes.OK}, SendWait)
						return
					}
					r, err := f.Calls().RequestMessages(e.CallID, 1)
					if err != nil {
						t.Error(err)
					}
					asked <- r
				}
			})
			cs, err := cc.NewStream(context.Background(), chatDesc, chatPath)
			if err != nil {
				t.Fatal(err)
			}
			send(t, cs, "a")
			send(t, cs, "b")
			big := make([]byte, 2048)
			_ = cs.SendMsg(&big)
			var got []string
			var end error
			for {
				var out []byte
				if end = cs.RecvMsg(&out); end != nil {
					break
				}
				got = append(got, string(out))
			}
			if fmt.Sprint(got) != "[echo a echo b]" {
				t.Fatalf("replies %q", got)
			}
			if !askPast {
				if end != io.EOF {
					t.Fatalf("answered before reading the refused message: %v, want OK", end)
				}
				return
			}
			wantStatus(t, end, codes.ResourceExhausted, "")
			if r := <-asked; r != ResultEnded {
				t.Fatalf("RequestMessages past the refusal: %v, want ResultEnded", r)
			}
		})
	}
}

func TestHeldSlotsLastUntilTheHandlerIsDone(t *testing.T) {
	calls := make(chan Event, 4)
	f, cc := startFront(t, `, "maximum_concurrent_rpcs": 1, "hold_slots": true`, func(f *Front, e Event) {
		if e.Kind == EventCall {
			calls <- e
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := say(ctx, cc, "first")
	wantStatus(t, err, codes.DeadlineExceeded, "")
	first := <-calls
	// The first call ended on the wire, but its handler still runs.
	_, err = say(context.Background(), cc, "second")
	wantStatus(t, err, codes.ResourceExhausted, "Concurrent RPC limit exceeded!")
	if r := f.Calls().HandlerDone(first.CallID); r != ResultOK {
		t.Fatalf("HandlerDone: %v", r)
	}
	if r := f.Calls().HandlerDone(first.CallID); r != ResultEnded {
		t.Fatalf("HandlerDone twice: %v", r)
	}
	go func() {
		e := <-calls
		f.Calls().Respond(e.CallID, msg("third"), SendWait)
		f.Calls().HandlerDone(e.CallID)
	}()
	if out, err := say(context.Background(), cc, "third"); err != nil || out != "third" {
		t.Fatalf("%q %v", out, err)
	}
}

func TestNegativeLimitRefusesEveryCall(t *testing.T) {
	var started atomic.Int32
	f, cc := startFront(t, `, "maximum_concurrent_rpcs": -1, "hold_slots": true`, func(f *Front, e Event) {
		if e.Kind == EventCall {
			started.Add(1)
			f.Calls().Respond(e.CallID, nil, SendWait)
		}
	})
	for i := 0; i < 3; i++ {
		_, err := say(context.Background(), cc, "x")
		wantStatus(t, err, codes.ResourceExhausted, "Concurrent RPC limit exceeded!")
	}
	if n := started.Load(); n != 0 {
		t.Fatalf("%d calls reached Python under a limit of -1", n)
	}
	if n := metric(f, "calls_refused"); n != 3 {
		t.Fatalf("calls_refused %d, want 3", n)
	}
}

// As grpcio, a path is looked up before the limit applies: at the limit a
// path no handler knows gets UNIMPLEMENTED, and one Python routes gets
// RESOURCE_EXHAUSTED; neither keeps a place once it has ended.
func TestLookupsTakeNoPlaceUntilRouted(t *testing.T) {
	hold := make(chan Event, 1)
	f, cc := startFront(t, `, "maximum_concurrent_rpcs": 1, "hold_slots": true, "resolve_unknown": true`, func(f *Front, e Event) {
		switch {
		case e.Kind == EventCall && e.MethodID == 0:
			hold <- e // the one place, until the test answers it
		case e.Kind == EventLookup && string(e.Bytes()) == "/late.Svc/Routed":
			id, _ := f.AddMethod(Method{Path: "/late.Svc/Routed"})
			f.Calls().Route(e.CallID, id)
		case e.Kind == EventLookup:
			f.Calls().Finish(e.CallID, Ending{Code: codes.Unimplemented, Details: "Method not found!"}, SendWait)
			f.Calls().HandlerDone(e.CallID)
		case e.Kind == EventCall:
			f.Calls().Respond(e.CallID, msg(string(e.Bytes())), SendWait)
			f.Calls().HandlerDone(e.CallID)
		}
	})
	first := make(chan error, 1)
	go func() { _, err := say(context.Background(), cc, "held"); first <- err }()
	held := <-hold
	in, out := []byte("x"), []byte(nil)
	for i := 0; i < 2; i++ {
		err := cc.Invoke(context.Background(), "/no.Such/Method", &in, &out)
		wantStatus(t, err, codes.Unimplemented, "Method not found!")
	}
	err := cc.Invoke(context.Background(), "/late.Svc/Routed", &in, &out)
	wantStatus(t, err, codes.ResourceExhausted, "Concurrent RPC limit exceeded!")
	f.Calls().Respond(held.CallID, msg("done"), SendWait)
	f.Calls().HandlerDone(held.CallID)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The place is free again: the routed method (now known) is served.
	if err := cc.Invoke(context.Background(), "/late.Svc/Routed", &in, &out); err != nil || string(out) != "x" {
		t.Fatalf("after the limit: %q %v", out, err)
	}
	deadline := time.Now().Add(2 * time.Second) // a call ends in Go just after its client has the answer
	for f.Calls().slots.used.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := f.Calls().slots.used.Load(); n != 0 {
		t.Fatalf("%d places still taken with no call running", n)
	}
}

func TestSlotsAreTakenAtomically(t *testing.T) {
	const limit = 4
	var live, peak atomic.Int32
	f, cc := startFront(t, fmt.Sprintf(`, "maximum_concurrent_rpcs": %d`, limit), func(f *Front, e Event) {
		if e.Kind != EventCall {
			return
		}
		n := live.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		go func() {
			time.Sleep(5 * time.Millisecond)
			live.Add(-1)
			f.Calls().Respond(e.CallID, nil, SendWait)
		}()
	})
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = say(context.Background(), cc, "x")
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > limit {
		t.Fatalf("%d calls ran at once under a limit of %d", p, limit)
	}
	if metric(f, "calls_refused") == 0 {
		t.Fatal("a burst of 200 was never refused")
	}
}

func TestNotifyRoomAfterAFullBuffer(t *testing.T) {
	calls := make(chan Event, 1)
	rooms := make(chan Event, 1)
	f, cc := startFront(t, "", func(f *Front, e Event) {
		switch e.Kind {
		case EventCall:
			calls <- e
		case EventRoom:
			rooms <- e
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, countPath)
	if err != nil {
		t.Fatal(err)
	}
	send(t, cs, "go")
	_ = cs.CloseSend()
	c := <-calls
	big := msg(string(make([]byte, 64<<10)))
	full := false
	for i := 0; i < 1000 && !full; i++ {
		full = f.Calls().Send(c.CallID, big, SendNoWait) == ResultWouldBlock
	}
	if !full {
		t.Fatal("the buffer never filled with a client that doesn't read")
	}
	if r := f.Calls().NotifyRoom(c.CallID); r != ResultOK {
		t.Fatal(r)
	}
	go func() {
		var out []byte
		for cs.RecvMsg(&out) == nil {
		}
	}()
	select {
	case e := <-rooms:
		if e.CallID != c.CallID {
			t.Fatal("EventRoom for another call")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no EventRoom once the client read")
	}
	if r := f.Calls().WaitRoom(c.CallID); r != ResultOK {
		t.Fatalf("WaitRoom: %v", r)
	}
	f.Calls().Finish(c.CallID, Ending{Code: codes.OK}, SendWait)
}

// recordedStats records what a CallStats hears, as text.
type recordedStats struct {
	mu  sync.Mutex
	log []string
}

func (r *recordedStats) add(s string) {
	r.mu.Lock()
	r.log = append(r.log, s)
	r.mu.Unlock()
}

func (r *recordedStats) Begin(method string, at time.Time) any {
	if at.IsZero() {
		r.add("begin without a time")
	}
	r.add("begin " + method)
	return method
}

func (r *recordedStats) Messages(call any, out bool, count, wireSize int) {
	r.add(fmt.Sprintf("%v out=%v %d/%d", call, out, count, wireSize))
}

func (r *recordedStats) End(call any, _ time.Time, code codes.Code, reset bool) {
	r.add(fmt.Sprintf("%v end %v reset=%v", call, code, reset))
}

func TestCallStatsSeeACall(t *testing.T) {
	f := configured(t, fmt.Sprintf(`{"address": "127.0.0.1:0", "methods": [[%q, false]]}`, sayPath))
	rec := &recordedStats{}
	if err := f.SetStats(rec); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	if err := f.SetStats(rec); err == nil {
		t.Fatal("SetStats after Start")
	}
	cc := dial(t, f)
	go func() {
		batch, _ := f.Events().Recv(1, math.MaxInt, -1)
		f.Calls().Respond(batch[0].CallID, msg("pong!"), SendWait)
	}()
	if _, err := say(context.Background(), cc, "ping"); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]string{"begin " + sayPath, sayPath + " out=false 1/9", sayPath + " out=true 1/10", sayPath + " end OK reset=false"})
	waitFor(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.log) >= 4 && fmt.Sprint(rec.log[:4]) == want
	})
}

// A pulled read's wake runs once the request stream's lock is released, for
// each way it can come (a message, the half-close, the call's end): the
// woken reader's next Read must not find the lock still held, which on a
// Python thread parks it in Go (a P hand-off, two more context switches).
func TestPullWakeRunsWithTheStreamUnlocked(t *testing.T) {
	for _, cause := range []string{"message", "half-close", "call end"} {
		t.Run(cause, func(t *testing.T) {
			calls := make(chan Event, 1)
			f, cc := streamingFront(t, "", func(f *Front, e Event) {
				if e.Kind == EventCall {
					calls <- e
				}
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cs, err := cc.NewStream(ctx, chatDesc, chatPath)
			if err != nil {
				t.Fatal(err)
			}
			send(t, cs, "first")
			e := <-calls
			if b, _, r, err := f.Calls().ReadWait(e.CallID); r != ResultOK || err != nil || string(b.Materialize()) != "first" {
				t.Fatalf("first read: %v %v", r, err)
			}
			c, _ := f.Calls().table.lookup(e.CallID)
			unlocked := make(chan bool, 1)
			_, _, r, _ := f.Calls().Read(e.CallID, func() {
				ok := c.requests.mu.TryLock()
				if ok {
					c.requests.mu.Unlock()
				}
				unlocked <- ok
			})
			if r != ResultWouldBlock {
				t.Fatalf("a read with nothing there: %v", r)
			}
			switch cause {
			case "message":
				send(t, cs, "second")
			case "half-close":
				if err := cs.CloseSend(); err != nil {
					t.Fatal(err)
				}
			default:
				cancel()
			}
			select {
			case ok := <-unlocked:
				if !ok {
					t.Fatal("the wake ran with the request stream's lock held")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no wake")
			}
			f.Calls().Finish(e.CallID, Ending{Code: codes.OK}, SendWait)
		})
	}
}
