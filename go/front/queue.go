package front

import (
	"sync"
	"sync/atomic"
	"time"
)

// EventKind says what an Event reports. The values are a public contract:
// Python sees them as EVENT_CALL and EVENT_CANCEL.
type EventKind uint8

const (
	// EventCall is a new call. Payload is the request message; Python
	// answers it by CallID.
	EventCall EventKind = 1
	// EventCancel says a call ended before Python finished it: the client
	// cancelled, its deadline passed, its connection closed, or the server
	// stopped. The client already has its status; answers to the call are
	// ignored. Payload is nil.
	EventCancel EventKind = 2
	// EventLookup is a call to a path the front does not know, sent only
	// when the front resolves unknown methods. Payload is the path (UTF-8)
	// and MethodID is -1. Python answers with Route (to a method it added)
	// or Finish (e.g. UNIMPLEMENTED).
	EventLookup EventKind = 3
)

// Event is one entry of the queue Python drains with Recv.
type Event struct {
	Kind      EventKind
	CallID    uint64
	MethodID  int32
	Payload   []byte
	ClientKey string
}

// eventQueue is an unbounded FIFO with many producers (handler goroutines)
// and any number of consumers (Python threads in recv_batch).
//
// It is unbounded on purpose: every event belongs to a call that grpc-go
// already admitted under max_concurrent_streams and the concurrency limit,
// so the queue is bounded by the number of live calls (plus one cancel
// event each).
type eventQueue struct {
	mu     sync.Mutex
	items  []Event
	head   int
	closed bool
	// ready holds a token while items may be non-empty or the queue is
	// closed; it wakes one waiting consumer, which passes it on.
	ready chan struct{}
	// standby is ready for standby consumers, which get events only while
	// no regular consumer waits: a thread that should step in only when
	// the others are busy (server()'s dispatcher, see recv).
	standby chan struct{}
	// waiting counts regular consumers that may be blocked in recv.
	waiting atomic.Int32
	// notify, when set, is readable exactly while the queue is non-empty
	// or closed (see notifier).
	notify *notifier
}

func newEventQueue() *eventQueue {
	return &eventQueue{ready: make(chan struct{}, 1), standby: make(chan struct{}, 1)}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// signal wakes one consumer: a regular one if any waits, else a standby one.
func (q *eventQueue) signal() {
	if q.waiting.Load() > 0 {
		wake(q.ready)
	} else {
		wake(q.standby)
	}
}

// signalAll wakes a consumer of each kind, for the end of the queue.
func (q *eventQueue) signalAll() {
	wake(q.ready)
	wake(q.standby)
}

// push appends an event. It reports false once the queue is closed.
func (q *eventQueue) push(e Event) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.raiseIfEmpty()
	q.items = append(q.items, e)
	q.mu.Unlock()
	q.signal()
	return true
}

// raiseIfEmpty raises the notifier before the first item goes in. Called
// with q.mu held.
func (q *eventQueue) raiseIfEmpty() {
	if q.notify != nil && q.head == len(q.items) {
		q.notify.raise()
	}
}

// notifier returns the queue's notifier, creating it on first use.
func (q *eventQueue) notifier() (*notifier, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.notify == nil {
		n, err := newNotifier()
		if err != nil {
			return nil, err
		}
		q.notify = n
		if q.head < len(q.items) || q.closed {
			n.raise()
		}
	}
	return q.notify, nil
}

// pushAll appends events in order, atomically with respect to other pushes.
func (q *eventQueue) pushAll(es []Event) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	if len(es) > 0 {
		q.raiseIfEmpty()
	}
	q.items = append(q.items, es...)
	q.mu.Unlock()
	q.signal()
	return true
}

func (q *eventQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) - q.head
}

// close ends the queue: consumers drain what is left, then get closed=true.
func (q *eventQueue) close() {
	q.mu.Lock()
	if !q.closed {
		q.raiseIfEmpty() // a closed queue reads as ready
	}
	q.closed = true
	q.mu.Unlock()
	q.signalAll()
}

// take removes up to max events without waiting.
func (q *eventQueue) take(max int) (batch []Event, closed bool) {
	q.mu.Lock()
	n := len(q.items) - q.head
	if n > max {
		n = max
	}
	if n > 0 {
		batch = make([]Event, n)
		copy(batch, q.items[q.head:q.head+n])
		clear(q.items[q.head : q.head+n])
		q.head += n
		if q.head == len(q.items) {
			q.items, q.head = q.items[:0], 0
			if q.notify != nil && !q.closed {
				q.notify.lower()
			}
		} else if q.head > 1024 && q.head > len(q.items)/2 {
			q.items = append(q.items[:0], q.items[q.head:]...)
			q.head = 0
		}
	}
	more := q.head < len(q.items)
	ended := q.closed
	closed = ended && n == 0 && !more
	q.mu.Unlock()
	switch {
	case ended:
		q.signalAll()
	case more:
		q.signal()
	}
	return batch, closed
}

// recv waits up to timeout (negative: forever) for at least one event and
// returns up to max of them. It returns closed=true once the queue is
// closed and empty, and (nil, false) on timeout. A standby consumer gets
// events only while no regular consumer is waiting.
func (q *eventQueue) recv(max int, timeout time.Duration, standby bool) (batch []Event, closed bool) {
	wakeup := q.ready
	if standby {
		wakeup = q.standby
	}
	var expired <-chan time.Time
	for {
		// A regular consumer counts itself before its last look, so that a
		// push right after that look wakes it rather than a standby one.
		if !standby {
			q.waiting.Add(1)
		}
		batch, closed = q.take(max)
		if batch != nil || closed || timeout == 0 {
			if !standby {
				q.waiting.Add(-1)
			}
			return batch, closed
		}
		if expired == nil && timeout > 0 {
			t := time.NewTimer(timeout)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-wakeup:
		case <-expired:
			if !standby {
				q.waiting.Add(-1)
			}
			return q.take(max)
		}
		if !standby {
			q.waiting.Add(-1)
		}
	}
}
