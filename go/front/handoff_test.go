package front

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/grpc/mem"
)

// A call whose client goes away before Python took its event never
// reaches Python: no EventCall, and no EventCancel either.
func TestCallEndedUnseenIsNeverDelivered(t *testing.T) {
	f, cc := newFront(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	go say(ctx, cc, "gone")
	waitFor(t, func() bool { return f.events.queued() == 1 })
	cancel()
	waitFor(t, func() bool { return metric(f, "calls_active") == 0 })

	if batch, _ := f.Events().Recv(64, math.MaxInt, 50*time.Millisecond); len(batch) != 0 {
		t.Fatalf("the abandoned call reached Python: %+v", batch)
	}
	if metric(f, "calls_cancelled") != 1 {
		t.Fatalf("calls_cancelled = %d, want 1", metric(f, "calls_cancelled"))
	}
}

// A call Python has taken gets exactly one EventCancel when it ends.
func TestCallEndedSeenGetsOneCancel(t *testing.T) {
	f, cc := newFront(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	go say(ctx, cc, "seen")
	var call Event
	waitFor(t, func() bool {
		b, _ := f.Events().Recv(1, math.MaxInt, 0)
		if len(b) == 1 {
			call = b[0]
		}
		return len(b) == 1
	})
	cancel()
	b, _ := f.Events().Recv(8, math.MaxInt, 5*time.Second)
	if len(b) != 1 || b[0].Kind != EventCancel || b[0].CallID != call.CallID {
		t.Fatalf("got %+v, want one EventCancel for call %d", b, call.CallID)
	}
}

// Recv stops a batch at maxBytes of payload, unless the first event alone
// is larger.
func TestRecvCapsBatchesByBytes(t *testing.T) {
	q := newEventQueue()
	for i := 0; i < 5; i++ {
		q.push(Event{Kind: EventCall, CallID: uint64(i + 1), Payload: msg(string(make([]byte, 100)))})
	}
	if b, _ := q.take(10, 250); len(b) != 2 {
		t.Fatalf("batch of %d events, want 2 (250 bytes hold two of 100)", len(b))
	}
	if b, _ := q.take(10, 50); len(b) != 1 {
		t.Fatalf("batch of %d events, want 1 (the first event alone is over the cap)", len(b))
	}
	if b, _ := q.take(10, math.MaxInt); len(b) != 2 {
		t.Fatalf("batch of %d events, want the last 2", len(b))
	}
}

// The op queue holds a burst of messages without waking the call's
// goroutine for each, refuses more than its limits without block, and
// releases a blocked sender when the goroutine takes the ops or the call
// ends.
func TestOpQueueLimitsAndWakeUps(t *testing.T) {
	q := newOpQueue()
	ended := new(endSignal)
	for i := 0; i < maxQueuedOps; i++ {
		if r := q.put(op{kind: opMessage}, false, writeBy{}, ended); r != ResultOK {
			t.Fatalf("op %d: %v", i, r)
		}
	}
	if len(q.ready) != 1 {
		t.Fatal("a burst must leave exactly one wake-up")
	}
	if r := q.put(op{kind: opMessage}, false, writeBy{}, ended); r != ResultWouldBlock {
		t.Fatalf("over the op limit: %v, want ResultWouldBlock", r)
	}
	done := make(chan Result)
	go func() { done <- q.put(op{kind: opMessage}, true, writeBy{}, ended) }()
	time.Sleep(10 * time.Millisecond)
	<-q.ready
	if got := len(q.take(nil)); got != maxQueuedOps {
		t.Fatalf("took %d ops", got)
	}
	if r := <-done; r != ResultOK {
		t.Fatalf("blocked sender: %v, want ResultOK once room was made", r)
	}

	big := op{kind: opMessage, message: mem.BufferSlice{mem.SliceBuffer(make([]byte, maxQueuedBytes+1))}}
	q.take(nil)
	if r := q.put(big, false, writeBy{}, ended); r != ResultOK {
		t.Fatalf("a large message alone: %v, want ResultOK", r)
	}
	if r := q.put(op{kind: opMessage, message: msg("x")}, false, writeBy{}, ended); r != ResultWouldBlock {
		t.Fatalf("over the byte limit: %v, want ResultWouldBlock", r)
	}
	go func() { done <- q.put(op{kind: opMessage}, true, writeBy{}, ended) }()
	time.Sleep(10 * time.Millisecond)
	ended.fire()
	if r := <-done; r != ResultEnded {
		t.Fatalf("sender blocked when the call ended: %v, want ResultEnded", r)
	}
}

// refusingQueue is a call's queue filled with 1,000-byte messages until
// the next one was refused (ResultWouldBlock), and its end signal.
func refusingQueue(t *testing.T) (*opQueue, *endSignal) {
	t.Helper()
	q := newOpQueue()
	ended := new(endSignal)
	kib := func() op { return op{kind: opMessage, message: mem.BufferSlice{mem.SliceBuffer(make([]byte, 1000))}} }
	for q.hasRoomLocked(1000) {
		if r := q.put(kib(), false, writeBy{}, ended); r != ResultOK {
			t.Fatalf("put: %v", r)
		}
	}
	if r := q.put(kib(), false, writeBy{}, ended); r != ResultWouldBlock {
		t.Fatalf("over the byte limit: %v, want ResultWouldBlock", r)
	}
	return &q, ended
}

// Room is judged for the op that found none. A queue a few bytes short of
// its byte limit has room for an empty op but not for the message that was
// refused: telling a non-blocking sender of room then (as notifyRoom did)
// had it retry and be refused again, in a loop that kept both cores busy
// for an aio.server() stream whose client stopped reading.
func TestRoomIsJudgedForTheRefusedOp(t *testing.T) {
	q, ended := refusingQueue(t)
	told := make(chan struct{}, 1)
	q.notifyRoom(func() { told <- struct{}{} })
	select {
	case <-told:
		t.Fatal("notifyRoom told of room the refused message doesn't fit in")
	default:
	}
	waited := make(chan bool, 1)
	go func() { waited <- q.waitRoom(ended) }()
	select {
	case <-waited:
		t.Fatal("waitRoom returned while the refused message doesn't fit")
	case <-time.After(20 * time.Millisecond):
	}
	q.take(nil)
	<-told
	if !<-waited {
		t.Fatal("waitRoom: false, want true once the queue was taken")
	}
}

// Room made wakes every sender waiting for it: a handler's thread blocked
// sending and another thread's abort waiting to queue the status (an
// aio.server() watchdog). One token woke one of them, and the other waited
// for good, the abort's status never sent.
func TestRoomWakesEverySenderWaiting(t *testing.T) {
	q, ended := refusingQueue(t)
	waited := make(chan bool, 2)
	for range 2 {
		go func() { waited <- q.waitRoom(ended) }()
	}
	time.Sleep(20 * time.Millisecond) // both wait
	q.take(nil)
	for i := range 2 {
		select {
		case ok := <-waited:
			if !ok {
				t.Fatalf("waiter %d: false, want true once the queue was taken", i)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("waiter %d was never woken", i)
		}
	}
}

// A full queue still takes a cancel, a route and the front's abort, without
// waiting even when asked to (Cancel and Route ask to; the abort of a
// refused request message is queued on h2's connection reader), up to
// maxControlOps of them; messages stay refused.
func TestControlOpsPassAFullQueue(t *testing.T) {
	q := newOpQueue()
	ended := new(endSignal)
	for q.hasRoomLocked(0) {
		if r := q.put(op{kind: opMessage}, false, writeBy{}, ended); r != ResultOK {
			t.Fatalf("put: %v", r)
		}
	}
	done := make(chan Result, 1)
	for i, kind := range []opKind{opCancel, opRoute, opAbort} {
		go func() { done <- q.put(op{kind: kind}, true, writeBy{}, ended) }()
		select {
		case r := <-done:
			if r != ResultOK {
				t.Fatalf("control op %d on a full queue: %v, want ResultOK", i, r)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("control op %d waited for room in a full queue", i)
		}
	}
	if r := q.put(op{kind: opMessage}, false, writeBy{}, ended); r != ResultWouldBlock {
		t.Fatalf("a message after the control ops: %v, want ResultWouldBlock", r)
	}
	for i := 3; i < maxControlOps; i++ {
		if r := q.put(op{kind: opCancel}, false, writeBy{}, ended); r != ResultOK {
			t.Fatalf("control op %d: %v, want ResultOK", i, r)
		}
	}
	if r := q.put(op{kind: opCancel}, false, writeBy{}, ended); r != ResultWouldBlock {
		t.Fatalf("control op past maxControlOps: %v, want ResultWouldBlock", r)
	}
	if got := len(q.take(nil)); got != maxQueuedOps+maxControlOps {
		t.Fatalf("took %d ops, want %d", got, maxQueuedOps+maxControlOps)
	}
}

// The batch a taker holds counts against the limits until its next take,
// so a call whose sends wait for flow control holds one budget: after a
// full batch is taken, one more op may queue (a large message can wait
// behind the one being sent), and no second one.
func TestTakenBatchCountsUntilTheNextTake(t *testing.T) {
	q := newOpQueue()
	ended := new(endSignal)
	for i := 0; i < maxQueuedOps; i++ {
		if r := q.put(op{kind: opMessage}, false, writeBy{}, ended); r != ResultOK {
			t.Fatalf("op %d: %v", i, r)
		}
	}
	if got := len(q.take(nil)); got != maxQueuedOps {
		t.Fatalf("took %d ops", got)
	}
	if r := q.put(op{kind: opMessage}, false, writeBy{}, ended); r != ResultOK {
		t.Fatalf("one op behind the taken batch: %v, want ResultOK", r)
	}
	if r := q.put(op{kind: opMessage}, false, writeBy{}, ended); r != ResultWouldBlock {
		t.Fatalf("a second op behind a full taken batch: %v, want ResultWouldBlock", r)
	}
	q.take(nil) // done with the batch: only the one op is held now
	for i := 1; i < maxQueuedOps-1; i++ {
		if r := q.put(op{kind: opMessage}, false, writeBy{}, ended); r != ResultOK {
			t.Fatalf("op %d after the batch: %v", i, r)
		}
	}
}

// Every message a handler sends is copied into its call's op queue as one
// op: the field order keeps it at 80 bytes on 64-bit platforms (96 with the
// small fields spread between the large ones).
func TestOpPacksInto80Bytes(t *testing.T) {
	if size := unsafe.Sizeof(op{}); unsafe.Sizeof(uintptr(0)) == 8 && size > 80 {
		t.Fatalf("op is %d bytes; keep the small fields together", size)
	}
}

// racedStream is an inlineStream whose first send from a driver that may
// not wait finds no room (errSendWouldWait), as the h2 transport's does
// when the peer's windows or the connection's backlog can't take it now.
type racedStream struct {
	ServerStream // nil: what the test doesn't reach
	mu           sync.Mutex
	refused      bool
	sent         []string // each send: its payload, "uncompressed", and whether it might wait
	noWait       bool
	done         chan struct{}
}

func (r *racedStream) WriteBy(by writeBy)       { r.mu.Lock(); r.noWait = by.noWait; r.mu.Unlock() }
func (r *racedStream) Flush()                   {}
func (r *racedStream) End(error)                {}
func (r *racedStream) NotifyEnd(wireEndHook)    {}
func (r *racedStream) Context() context.Context { return context.Background() }
func (r *racedStream) SendMessage(b mem.BufferSlice, uncompressed bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.noWait && !r.refused {
		r.refused = true
		return errSendWouldWait
	}
	r.sent = append(r.sent, fmt.Sprintf("%s uncompressed=%v mayWait=%v", b.Materialize(), uncompressed, !r.noWait))
	b.Free()
	close(r.done)
	return nil
}

// A message that can't be sent without waiting is sent once, whole, by a
// goroutine that may wait, with what was asked of it (uncompressed), and
// the Python thread that queued it never waits.
func TestASendWithNoRoomIsHandedOver(t *testing.T) {
	out := &racedStream{done: make(chan struct{})}
	c := &call{ctx: context.Background(), ops: newOpQueue()}
	h := &handler{cfg: &Config{Limits: Limits{MaxSendMsgSize: 1 << 20}}}
	s := &stream{h: h, c: c, out: out}
	c.ops.driver = s
	ended := new(endSignal)
	if r := c.ops.put(op{kind: opUncompressedNext}, false, writeBy{}, ended); r != ResultOK {
		t.Fatalf("put: %v", r)
	}
	if r := c.ops.put(op{kind: opMessage, message: msg("m")}, false, writeBy{}, ended); r != ResultOK {
		t.Fatalf("put: %v", r)
	}
	select {
	case <-out.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the message was never sent")
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if want := []string{"m uncompressed=true mayWait=true"}; !slices.Equal(out.sent, want) || !out.refused {
		t.Fatalf("sends %q (refused once: %v), want %q after one refusal", out.sent, out.refused, want)
	}
}
