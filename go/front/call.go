package front

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/mem"
)

// call is one live call. The handler goroutine that created it is its only
// owner: it alone writes to the stream, so Python's threads talk to it
// through ops and never touch the transport directly.
type call struct {
	id       uint64
	methodID int32 // -1 while a lookup is pending
	path     string
	// st is the call as its transport carries it; its properties may be
	// read from any goroutine, its sends only by the owner.
	st ServerStream
	// requests is the request stream of a client-streaming method, set
	// before the call's EventCall is queued; nil for unary requests.
	requests *requestStream
	// ctx ends at the call's own deadline (callDeadline) or when the
	// client goes away. With a deadline it is own, when the transport's
	// context is a streamContext and the call is driven (newCall), else a
	// context.WithDeadline whose stop releases its timer. Either way
	// Calls.end ends it, after unwatchEnd.
	ctx       context.Context
	stop      context.CancelFunc
	own       streamContext
	conn      *connState // nil for a connection no listener of ours accepted
	clientKey string
	ops       opQueue
	// ended fires when the handler goroutine is done with the call
	// (Calls.end): ops posted afterwards report ResultEnded, and Python
	// threads waiting for room in ops are released.
	ended endSignal
	// watched sends the call's EventCancel to the watched queue instead of
	// the main one. Guarded by the call's shard lock, so that Watch and the
	// call's end agree on where the event goes.
	watched bool
	// handlerDone: Python reported that the call's handler returned
	// (Calls.HandlerDone), so the call's concurrency slot is free once the
	// call ends. Guarded by the call's shard lock.
	handlerDone bool
	// slotless: the call holds no maximum_concurrent_rpcs place. A
	// lookup's call (EventLookup) takes none until Python routes it to a
	// method, since grpcio looks a method up before it applies the limit:
	// a path no handler knows gets UNIMPLEMENTED at the limit too. Guarded
	// by the call's shard lock once the call is live (callTable.claimSlot).
	slotless bool

	// seen: Python has taken one of the call's events; called: one of
	// them was its EventCall, so a handler may run for it (a looked-up
	// call is seen from its EventLookup on); gone: the call has ended.
	// All are guarded by the event queue's lock (eventQueue.take,
	// endUnseen), which is how a call that ends unseen drops its events.
	seen, called, gone bool

	// awaitingRoute is true while the call waits for Python to route it
	// (EventLookup).
	awaitingRoute atomic.Bool
	// handedOver is set just before the call's first event is queued
	// (handler.deliver): its owner has set up how its ops are applied
	// (stream.driven), so the front itself may post ops to it from then on
	// (Calls.cancelAll); Python's own ops come after the event anyway.
	handedOver atomic.Bool
	// cancelAsked: Python cancelled the call (Calls.Cancel). It is no
	// longer active for Python from then on, before its opCancel is
	// applied, as grpcio's context.cancel() ends is_active() at once, and
	// Python's later ops are refused as for an ended call (postTo): grpcio's
	// send after cancel() fails, so a response stream stops there.
	cancelAsked atomic.Bool

	// Owned by the handler goroutine: a unary call answers with exactly
	// one message, held until the status goes out with it.
	unary      bool
	heldReply  mem.BufferSlice
	holdsReply bool
	// uncompressedNext sends the next message uncompressed
	// (disable_next_message_compression()).
	uncompressedNext bool

	// owner is the stream serving the call as its method (serveMethod),
	// allocated with the call rather than on its own; see newStream.
	owner stream
}

// ownsDeadline reports that ctx is c's own context (see ctx).
func (c *call) ownsDeadline() bool { return c.ctx == context.Context(&c.own) }

// watchEnd makes the end of a driven call's own deadline (callDeadline)
// abandon the call (opQueue.abandon): grpc-go's transport tells no end
// before the deadline, and h2's expire may come second. An own context is
// ended by a timer, which then abandons the call; a context.WithDeadline
// is watched with context.AfterFunc. Set
// under ops.mu, as the timer or watch may run (and the call end) before
// watchEnd has stored it.
func (c *call) watchEnd() {
	q := &c.ops
	var t *time.Timer
	var stop func() bool
	if c.ownsDeadline() {
		t = time.AfterFunc(time.Until(c.own.deadline), func() {
			if c.own.cancel(context.DeadlineExceeded) {
				q.abandon()
			}
		})
	} else {
		stop = context.AfterFunc(c.ctx, q.abandon)
	}
	q.mu.Lock()
	q.deadline, q.unwatch = t, stop
	q.mu.Unlock()
}

// unwatchEnd undoes watchEnd, if it was done, and reports whether that kept
// its timer or watch from running. Calls.end calls it before it ends the
// call's context: left watched, a context.WithDeadline would run its watch
// then, for nothing, on a goroutine of its own, at the end of every call
// with a deadline.
func (c *call) unwatchEnd() bool {
	q := &c.ops
	q.mu.Lock()
	t, stop := q.deadline, q.unwatch
	q.deadline, q.unwatch = nil, nil
	q.mu.Unlock()
	if t != nil {
		return t.Stop()
	}
	return stop != nil && stop()
}

// endContext ends the call's context, if it has one of its own making
// (a deadline); Calls.end calls it once unwatchEnd has run.
func (c *call) endContext() {
	if c.ownsDeadline() {
		c.own.cancel(context.Canceled)
	} else if c.stop != nil {
		c.stop()
	}
}

// newStream is the stream that serves c as its method: c.owner, set up
// now. Called once per call, by the goroutine that owns it (serveMethod),
// before the call's EventCall is queued. It lives as long as the call:
// nothing reuses it (a looked-up call's lookup is served by a stream of
// its own, on the stack of resolve).
func (c *call) newStream(h *handler) *stream {
	s := &c.owner
	*s = stream{h: h, c: c, out: c.st}
	s.batch = s.batchBuf[:0]
	return s
}

// callMemory is a ServerStream that carries the memory of its call, so
// that the two are one allocation (h2Stream). takeCallMemory returns it the
// first time, zeroed, and nil after that; a stream has at most one call
// (newCall runs once per stream), so the memory is never shared, and it is
// never reused: the stream and its call live as long as anything (the call
// table, an Event, a ticket, the stream's own reader) refers to either.
type callMemory interface {
	takeCallMemory() *call
}

// newCallMemory is where newCall puts the call of st: in st's own memory
// when it has some (callMemory), else a new allocation.
func newCallMemory(st ServerStream) *call {
	if m, ok := st.(callMemory); ok {
		if c := m.takeCallMemory(); c != nil {
			return c
		}
	}
	return new(call)
}

// endSignal is a one-time signal (a call's end) whose channel is made only
// when someone has to wait for it: most calls end with nobody waiting, and
// a channel per call would be an allocation per call.
type endSignal struct {
	set atomic.Bool // fired; written under mu
	mu  sync.Mutex
	ch  chan struct{} // made by the first wait; closed by fire
}

// closedSignal is the channel wait returns once the signal has fired.
var closedSignal = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// fire sets the signal and releases its waiters; once only.
func (e *endSignal) fire() {
	e.mu.Lock()
	e.set.Store(true)
	if e.ch != nil {
		close(e.ch)
	}
	e.mu.Unlock()
}

// fired reports whether the signal is set.
func (e *endSignal) fired() bool { return e.set.Load() }

// wait returns a channel closed once the signal is set.
func (e *endSignal) wait() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ch == nil {
		if e.set.Load() {
			return closedSignal
		}
		e.ch = make(chan struct{})
	}
	return e.ch
}

// takeUncompressedNext reports whether the message about to be sent goes
// uncompressed, and clears the request: it applies to one message.
func (c *call) takeUncompressedNext() bool {
	u := c.uncompressedNext
	c.uncompressedNext = false
	return u
}

// callTable maps call ids to live calls and issues the ids. It is sharded
// so that handler goroutines and Python threads working on different calls
// rarely meet on one lock. Ids start at 1 and only grow, so an id at most
// lastID that is absent belonged to a call that has ended.
type callTable struct {
	shards [64]callShard
	lastID atomic.Uint64
	// phase is the front's, to tell an ended call from a stopped front.
	phase *phase
}

type callShard struct {
	mu    sync.Mutex
	calls map[uint64]*call
	// held are calls that have ended while Python's handler still runs:
	// they keep their concurrency slot until HandlerDone (fronts that hold
	// slots only).
	held map[uint64]*call
}

func (t *callTable) shard(id uint64) *callShard { return &t.shards[id%uint64(len(t.shards))] }

// add gives c the next id and makes it live.
func (t *callTable) add(c *call) {
	c.id = t.lastID.Add(1)
	s := t.shard(c.id)
	s.mu.Lock()
	if s.calls == nil {
		s.calls = make(map[uint64]*call)
	}
	s.calls[c.id] = c
	s.mu.Unlock()
}

func (t *callTable) get(id uint64) *call {
	s := t.shard(id)
	s.mu.Lock()
	c := s.calls[id]
	s.mu.Unlock()
	return c
}

// live is every live call, at the moment each shard is looked at.
func (t *callTable) live() []*call {
	var out []*call
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for _, c := range s.calls {
			out = append(out, c)
		}
		s.mu.Unlock()
	}
	return out
}

// lookup finds a live call or says why there is none.
func (t *callTable) lookup(id uint64) (*call, Result) {
	if c := t.get(id); c != nil {
		return c, ResultOK
	}
	if id == 0 || id > t.lastID.Load() {
		return nil, ResultUnknown
	}
	if t.phase.get() == phaseStopped {
		return nil, ResultStopped
	}
	return nil, ResultEnded
}

// remove forgets a call and reports whether it was watched. With hold, the
// call keeps its slot until Python's handler is done (releaseSlot), unless
// it already is: slotFree reports whether the slot is free now.
func (t *callTable) remove(c *call, hold bool) (watched, slotFree bool) {
	s := t.shard(c.id)
	s.mu.Lock()
	delete(s.calls, c.id)
	watched = c.watched
	if c.slotless {
		s.mu.Unlock()
		return watched, false // no place to give back, nor to hold
	}
	slotFree = !hold || c.handlerDone
	if !slotFree {
		if s.held == nil {
			s.held = make(map[uint64]*call)
		}
		s.held[c.id] = c
	}
	s.mu.Unlock()
	return watched, slotFree
}

// claimSlot records that call c, slotless until now, holds the place its
// caller has just taken. c is live: only its own handler goroutine, the
// caller, ends it.
func (t *callTable) claimSlot(c *call) {
	s := t.shard(c.id)
	s.mu.Lock()
	c.slotless = false
	s.mu.Unlock()
}

// handlerDone records that Python's handler of call id returned. It
// reports whether the call still held its slot after it ended (the slot is
// free now: the caller gives it back), and whether id is a call at all
// (live, or ended and holding its slot).
func (t *callTable) handlerDone(id uint64) (slotFree, found bool) {
	s := t.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.calls[id]; c != nil {
		c.handlerDone = true
		return false, true
	}
	if _, ok := s.held[id]; ok {
		delete(s.held, id)
		return true, true
	}
	return false, false
}

// watch marks a live call as watched; false if it is not live.
func (t *callTable) watch(id uint64) bool {
	s := t.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls[id]
	if c != nil {
		c.watched = true
	}
	return c != nil
}
