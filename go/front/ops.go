package front

import (
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
)

// opKind is what Python asked a call to do.
type opKind uint8

const (
	opHeader           opKind = iota // send initial metadata
	opMessage                        // send one response message
	opFinish                         // end the call: optional last message, trailers, status
	opCancel                         // end the call with CANCELLED, as context.cancel() does
	opRoute                          // continue a looked-up call as a known method
	opCompression                    // set the response compression
	opUncompressedNext               // send the next message uncompressed
	opAbort                          // end the call with code and details, Python told as for a cancel
)

// op is one instruction to the goroutine that owns a call, from Python (or,
// for opAbort, from the front itself: a request message the transport
// refused, or the calls a stop cancels once its grace has passed).
// Each kind reads only its own fields. The small fields come first so that
// an op packs into 80 bytes: every message a handler sends is copied into
// its call's queue as one.
type op struct {
	kind opKind
	// opMessage, opFinish: whether message is set (opFinish sends it only
	// when the status is OK).
	hasMessage bool
	// opFinish, opAbort: the status code (details below).
	code codes.Code
	// opRoute: the method the call continues as (or FallbackMethodID).
	routeTo int32
	// opMessage, opFinish: the message; the call owns it from here on.
	message mem.BufferSlice
	// opHeader: initial metadata; opFinish: trailing metadata.
	md Metadata
	// opFinish, opAbort: the status details; opCompression: the
	// compressor's name ("" for none).
	details string
}

// Limits of what Python may queue on one call before a send waits (or, for
// an event loop's front, reports ResultWouldBlock). They let a handler run
// ahead of the client by about one HTTP/2 window, and no further, however
// small its messages; a single larger message always goes through alone.
// They count the batch the call's taker holds as well as the queue (see
// opQueue.heldOps), so a call whose client stops reading holds one budget,
// not one in the taker's hands and another queued behind it.
const (
	maxQueuedOps   = 256
	maxQueuedBytes = 64 << 10
	// maxControlOps: how many control ops (opKind.control) a full queue
	// still takes past maxQueuedOps. One that ends the call is all a call
	// needs; the margin only bounds a caller that repeats itself.
	maxControlOps = 8
)

// control reports an op that a full queue still takes (up to
// maxControlOps past its limits), so that queueing it never waits for a
// client that stopped reading: a cancel or route from an event loop's
// thread (the low-level API's blocking=False), and the front's own abort
// of a request message the transport refused, which h2 queues on the
// connection's reader: left waiting for room there, that reader could
// never read the WINDOW_UPDATE that makes room, and every call on the
// connection would hang. They carry no payload. What was queued before
// one is still applied first, so on a call whose client stopped reading
// it takes effect once that is written, or when the call ends.
func (k opKind) control() bool { return k == opCancel || k == opRoute || k == opAbort }

// opQueue carries a call's ops from Python's threads to the call's
// goroutine, in order. The goroutine takes every queued op at once, and a
// sender wakes it only when it put the first op into an empty queue: while
// the goroutine is busy sending, a burst of messages costs no wake-ups.
type opQueue struct {
	mu    sync.Mutex
	ops   []op
	bytes int
	// heldOps and heldBytes are the batch the taker (the call's goroutine
	// or its driver) took last and may still be applying: set by each
	// take, which the taker makes only once it is done with the batch
	// before, given back by requeue, cleared when a driver stops. They
	// count against the limits (hasRoomLocked) until then; the room a take
	// makes is for one op, whatever its size, so that a large message can
	// wait queued while the one before it is sent.
	heldOps, heldBytes int
	// refused is the size of the op a put last found no room for: the room
	// waitRoom and notifyRoom wait for. Judged for an empty op instead,
	// room was there as soon as the queue held one byte less than the
	// limit, so a non-blocking sender whose message didn't fit was told of
	// room at once, again and again (aio.server() with a client that
	// stopped reading: both cores busy). Guarded by mu.
	refused int
	// headerClaimed: a send of initial metadata was queued (claimHeader).
	// Guarded by mu.
	headerClaimed bool
	// full is set by a sender that found no room; the goroutine then
	// signals room after its next take.
	full bool
	// onRoom, when set, is called once (and cleared) after the next take
	// that makes room (NotifyRoom). Guarded by mu.
	onRoom func()
	// ready holds a token while ops may wait (for the call's goroutine).
	ready chan struct{}
	// room is closed when room was made, waking every sender waiting (a
	// handler's send and another thread's abort may wait on one call);
	// made by the first sender that has to wait (most calls never do),
	// replaced after each close. Guarded by mu.
	room chan struct{}

	// Driven calls (driver set; see stream.drive): no goroutine waits for
	// ops; whoever queues one and finds nobody driving the call drives it
	// (applies the ops) on its own thread. driving: someone is; abandoned:
	// the call ended on the wire, for the driver to act on; closed: the call
	// is over, and later ops report ResultEnded. All guarded by mu; driver
	// is set before the call's first event is queued and never changes.
	// drive's argument says who writes the frames of the ops it applies
	// (put's by).
	driver    *stream
	driving   bool
	abandoned bool
	closed    bool
	// deadline and unwatch stop what call.watchEnd set up (one or the
	// other); guarded by mu.
	deadline *time.Timer
	unwatch  func() bool

	// first is ops' first backing array (put), so that a call whose ops
	// come one at a time queues them without allocating. ops goes on
	// using it after each take (takeLocked keeps ops[:0]), and only a
	// burst of more ops than it holds moves ops to the heap.
	first [1]op
}

func newOpQueue() opQueue {
	return opQueue{ready: make(chan struct{}, 1)}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// put queues o. Without block it never waits; with block it waits for room
// until ended fires (the call has ended: ResultEnded). by says who writes
// the frames of the ops it drives (Calls.post).
func (q *opQueue) put(o op, block bool, by writeBy, ended *endSignal) Result {
	size := o.message.Len()
	for {
		if ended.fired() {
			return ResultEnded
		}
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return ResultEnded
		}
		n := len(q.ops)
		if q.hasRoomLocked(size) || (o.kind.control() && n+q.heldOps < maxQueuedOps+maxControlOps) {
			if q.ops == nil {
				q.ops = q.first[:0]
			}
			q.ops = append(q.ops, o)
			q.bytes += size
			if q.driver != nil {
				run := !q.driving
				q.driving = true
				q.mu.Unlock()
				if run {
					q.driver.drive(by)
				}
				return ResultOK
			}
			q.mu.Unlock()
			if n == 0 {
				signal(q.ready)
			}
			return ResultOK
		}
		q.full = true
		q.refused = size
		room := q.roomLocked()
		q.mu.Unlock()
		if !block {
			return ResultWouldBlock
		}
		select {
		case <-room:
		case <-ended.wait():
			return ResultEnded
		}
	}
}

// claimHeader reports whether the call may still queue its initial
// metadata, and claims that for the caller: once per call. A send that
// then finds no room gives the claim back (unclaimHeader), for its retry.
func (q *opQueue) claimHeader() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.headerClaimed {
		return false
	}
	q.headerClaimed = true
	return true
}

func (q *opQueue) unclaimHeader() {
	q.mu.Lock()
	q.headerClaimed = false
	q.mu.Unlock()
}

// take moves every queued op to the end of dst and returns it. Called by
// the call's goroutine when ready fires.
func (q *opQueue) take(dst []op) []op {
	q.mu.Lock()
	return q.takeLocked(dst)
}

// takeDriven is take for the driver of a driven call: the queued ops, and
// whether the call was abandoned. With neither (ok false) the caller stops
// driving, in the same step, so an op queued after it starts a new driver.
func (q *opQueue) takeDriven(dst []op) (ops []op, abandoned, ok bool) {
	q.mu.Lock()
	if len(q.ops) == 0 && !q.abandoned {
		q.driving = false
		q.heldOps, q.heldBytes = 0, 0
		q.mu.Unlock()
		return dst, false, false
	}
	abandoned = q.abandoned
	return q.takeLocked(dst), abandoned, true
}

// requeue puts ops the driver took but could not apply without waiting back
// at the front of the queue, for the goroutine it hands the call to.
func (q *opQueue) requeue(ops []op) {
	q.mu.Lock()
	q.ops = append(append(make([]op, 0, len(ops)+len(q.ops)), ops...), q.ops...)
	for _, o := range ops {
		q.bytes += o.message.Len()
		q.heldBytes -= o.message.Len()
	}
	q.heldOps -= len(ops)
	q.mu.Unlock()
}

// abandon records that a driven call ended (on the wire, or its own
// deadline passed) and drives it if nobody is, so that its end is acted on.
// It may drive on the calling goroutine: a context.AfterFunc's.
func (q *opQueue) abandon() {
	if q.markAbandoned() {
		q.driver.drive(writeBy{})
	}
}

// wireEnded is abandon as the transport's end hook (inlineStream.
// NotifyEnd): the transport may call it from its reader or from inside a
// send, so a driver it needs runs on a goroutine of its own. Most often the
// hook comes from the call's own Finish, while its driver runs: then it
// only sets a flag nobody reads.
func (q *opQueue) wireEnded() {
	if q.markAbandoned() {
		go q.driver.drive(writeBy{})
	}
}

// markAbandoned records the call's end for its driver and reports whether
// the caller must drive the call (nobody is, and it is not closed).
func (q *opQueue) markAbandoned() (run bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	q.abandoned = true
	run = !q.driving
	q.driving = true
	return run
}

// close ends a driven call's queue: later ops report ResultEnded, and what
// is still queued is dropped.
func (q *opQueue) close() {
	q.mu.Lock()
	q.closed = true
	for _, o := range q.ops {
		o.message.Free()
	}
	clear(q.ops)
	q.ops, q.bytes = nil, 0
	q.heldOps, q.heldBytes = 0, 0
	q.mu.Unlock()
}

// takeLocked is take with mu held; it releases mu.
func (q *opQueue) takeLocked(dst []op) []op {
	dst = append(dst, q.ops...)
	clear(q.ops)
	q.heldOps, q.heldBytes = len(q.ops), q.bytes
	q.ops, q.bytes = q.ops[:0], 0
	if q.full && q.room != nil {
		close(q.room)
		q.room = nil
	}
	q.full = false
	onRoom := q.onRoom
	q.onRoom = nil
	q.mu.Unlock()
	if onRoom != nil {
		onRoom()
	}
	return dst
}

// hasRoom reports whether a message of size bytes would be taken now.
// Called with mu held.
func (q *opQueue) hasRoomLocked(size int) bool {
	n := len(q.ops)
	return n == 0 || (n+q.heldOps < maxQueuedOps && q.bytes+q.heldBytes+size <= maxQueuedBytes)
}

// waitRoom waits until the queue has room for the op it last refused (or
// ended fires: false), without queueing anything.
func (q *opQueue) waitRoom(ended *endSignal) bool {
	for {
		q.mu.Lock()
		if q.hasRoomLocked(q.refused) {
			q.mu.Unlock()
			return true
		}
		q.full = true
		room := q.roomLocked()
		q.mu.Unlock()
		select {
		case <-room:
		case <-ended.wait():
			return false
		}
	}
}

// roomLocked is the channel the next room closes. mu held.
func (q *opQueue) roomLocked() chan struct{} {
	if q.room == nil {
		q.room = make(chan struct{})
	}
	return q.room
}

// notifyRoom calls fn once the queue has room for the op it last refused:
// at once if it has now, otherwise after the owner's next take.
func (q *opQueue) notifyRoom(fn func()) {
	q.mu.Lock()
	if q.hasRoomLocked(q.refused) {
		q.mu.Unlock()
		fn()
		return
	}
	q.onRoom = fn
	q.mu.Unlock()
}
