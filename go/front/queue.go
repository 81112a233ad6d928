package front

import (
	"sync"
	"time"
)

// eventQueue is an unbounded FIFO with many producers (handler goroutines)
// and any number of consumers (Python threads in recv_batch). Which
// consumer gets a batch, and how many threads consume at all, is the
// consumers' policy: the queue only wakes one waiting consumer per push
// (who passes the wake-up on while events remain).
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
	// notify, when set, is readable exactly while the queue is non-empty
	// or closed (see notifier).
	notify *notifier
}

func newEventQueue() *eventQueue {
	return &eventQueue{ready: make(chan struct{}, 1)}
}

// signal wakes one waiting consumer, if any.
func (q *eventQueue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
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

// closeNotifier closes the notifier's pipe, if there is one.
func (q *eventQueue) closeNotifier() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.notify != nil {
		q.notify.close()
		q.notify = nil
	}
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
	q.signal()
}

// endUnseen marks c as ended and reports whether Python has taken any of
// its events, and its EventCall. If none, Python never hears of the call:
// take drops its queued events, and no EventCancel is due. Without its
// EventCall (dropped too, if queued), no handler runs for it. Every event
// of a call goes through this queue, so its lock orders the two.
func (q *eventQueue) endUnseen(c *call) (seen, called bool) {
	q.mu.Lock()
	c.gone = true
	seen, called = c.seen, c.called
	q.mu.Unlock()
	return seen, called
}

// take removes up to max events, and no more than maxBytes of payload
// unless the first event alone is larger, without waiting. Events of calls
// that ended before Python saw them are dropped on the way.
func (q *eventQueue) take(max, maxBytes int) (batch []Event, closed bool) {
	return q.takeInto(nil, max, maxBytes)
}

// takeInto is take appending the batch to dst[:0] (nil when there is no
// event and dst is nil), so that a caller can reuse one slice.
func (q *eventQueue) takeInto(dst []Event, max, maxBytes int) (batch []Event, closed bool) {
	batch = dst[:0]
	q.mu.Lock()
	bytes := 0
	i := q.head
	for ; i < len(q.items) && len(batch) < max; i++ {
		e := &q.items[i]
		c := e.call
		if c != nil && e.Kind != EventCancel && c.gone {
			e.Release()
			continue
		}
		size := e.Payload.Len()
		if len(batch) > 0 && bytes+size > maxBytes {
			break
		}
		bytes += size
		if c != nil {
			c.seen = true
			if e.Kind == EventCall {
				c.called = true
			}
		}
		if cap(batch) == 0 {
			batch = make([]Event, 0, min(max, len(q.items)-i))
		}
		batch = append(batch, *e)
	}
	clear(q.items[q.head:i])
	q.head = i
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
		if q.notify != nil && !q.closed {
			q.notify.lower()
		}
	} else if q.head > 1024 && q.head > len(q.items)/2 {
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
	more := q.head < len(q.items)
	closed = q.closed && len(batch) == 0 && !more
	if more || q.closed {
		q.signal() // pass the wake-up on
	}
	q.mu.Unlock()
	return batch, closed
}

// recv waits up to timeout (negative: forever) for at least one event and
// returns a batch as take does. It returns closed=true once the queue is
// closed and empty, and (nil, false) on timeout.
func (q *eventQueue) recv(max, maxBytes int, timeout time.Duration) (batch []Event, closed bool) {
	return q.recvInto(nil, max, maxBytes, timeout)
}

// recvInto is recv returning the batch in dst's memory (takeInto); on
// timeout the batch is empty.
func (q *eventQueue) recvInto(dst []Event, max, maxBytes int, timeout time.Duration) (batch []Event, closed bool) {
	var expired <-chan time.Time
	for {
		batch, closed = q.takeInto(dst, max, maxBytes)
		if len(batch) > 0 || closed || timeout == 0 {
			return batch, closed
		}
		if expired == nil && timeout > 0 {
			t := time.NewTimer(timeout)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-q.ready:
		case <-expired:
			return q.takeInto(dst, max, maxBytes)
		}
	}
}
