package front

import "sync"

// Sending says how a send may wait for room in its call's buffer, and who
// writes the frames it queues to the socket.
type Sending uint8

const (
	// SendNoWait never waits: ResultWouldBlock when the call's buffer is
	// full. Its frames are written by the sender when the connection is
	// idle (a thread's lone answer costs no wake-up), or by the
	// connection's flusher when Python's sends come from an event loop
	// (Calls.SetLoopSenders).
	SendNoWait Sending = iota
	// SendWait waits for room until the call ends.
	SendWait
	// SendHeld is SendNoWait from an event loop that writes the frames
	// itself, with Calls.FlushHeld, once for all the sends of one turn of
	// the loop: neither the loop's time nor a wake-up of the flusher is
	// spent per answer, and a burst of answers leaves in one write per
	// connection. Until the loop flushes, they wait in the connection's
	// buffer; the loop must flush before it next waits for I/O.
	SendHeld
)

// writeBy says who writes to the socket the frames a driver's sends queue
// (inlineStream.WriteBy). The zero value: the sender itself when the
// connection is idle, else whoever is writing.
type writeBy struct {
	// noWait: the sender must not wait for the peer (a driver on a
	// Python thread or an event loop, stream.drive): a message that
	// can't go at once is not sent at all, its send reports
	// errSendWouldWait, and the driver hands it to a goroutine that may
	// wait (stream.driveWaiting). Senders on goroutines of their own
	// (that one, the fallback relay, health in Go) wait.
	noWait bool
	// flusher: the connection's flusher goroutine, whatever the
	// connection's state (an event loop that doesn't hold its writes).
	flusher bool
	// held: the event loop that sent them, at its next Calls.FlushHeld;
	// the connection waits on held's list until then.
	held *heldWrites
}

// heldFlusher is a connection with frames held for an event loop's flush.
type heldFlusher interface {
	// flushHeld writes out what the connection holds, unless another
	// goroutine is writing (it will). Called holding no lock.
	flushHeld()
}

// heldWrites lists the connections holding an event loop's frames
// (SendHeld) until the loop flushes them. A connection is listed once
// between flushes (it keeps the mark under its own lock, taken before
// mu); mu guards the list alone and is never held while writing.
type heldWrites struct {
	mu      sync.Mutex
	pending []heldFlusher
	// spare is the list the last flush went through, reused for the next.
	spare []heldFlusher
}

// add lists a connection; its caller marked it, so it is not listed yet.
func (h *heldWrites) add(w heldFlusher) {
	h.mu.Lock()
	h.pending = append(h.pending, w)
	h.mu.Unlock()
}

// flush writes out every listed connection's frames.
func (h *heldWrites) flush() {
	h.mu.Lock()
	list := h.pending
	h.pending, h.spare = h.spare[:0], nil
	h.mu.Unlock()
	for i, w := range list {
		w.flushHeld()
		list[i] = nil
	}
	h.mu.Lock()
	if h.spare == nil {
		h.spare = list[:0]
	}
	h.mu.Unlock()
}
