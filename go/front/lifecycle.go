package front

import (
	"sync"
	"sync/atomic"
	"time"
)

// The phases of a front's life, in order; a front never goes back.
const (
	phaseNew int32 = iota
	phaseServing
	phaseStopping
	phaseStopped
)

// LifecycleError is Start or Bind used out of order. The C shim raises it as
// RuntimeError.
type LifecycleError struct{ msg string }

func (e *LifecycleError) Error() string { return e.msg }

// phase is where a front is in its life. Front changes it (under its own
// lock, so that Bind, Start and Stop see one order); handlers and Calls
// read it without locks, on every call.
type phase struct{ v atomic.Int32 }

func (p *phase) get() int32  { return p.v.Load() }
func (p *phase) set(v int32) { p.v.Store(v) }

// checkNew refuses what only a front that has not started may do.
func (p *phase) checkNew() error {
	switch p.get() {
	case phaseServing:
		return &LifecycleError{"the front is already started"}
	case phaseStopping, phaseStopped:
		return &LifecycleError{"the front is stopped and cannot be started again; create a new one"}
	}
	return nil
}

// stopFlush is how long a stop whose grace has passed lets the calls it
// cancelled write their status (Calls.cancelAll) before it closes every
// connection: enough for any client that reads, short for a stop(None).
const stopFlush = 250 * time.Millisecond

// stopClock is when a graceful stop cancels the calls still in flight. A
// later stop can only move that moment earlier, never later, as with
// grpcio's stop().
type stopClock struct {
	mu       sync.Mutex
	deadline time.Time
	// sooner wakes wait when shorten moved the deadline; capacity 1.
	sooner chan struct{}
}

func newStopClock(grace time.Duration) *stopClock {
	return &stopClock{deadline: graceDeadline(grace), sooner: make(chan struct{}, 1)}
}

// graceDeadline is when calls still in flight are cancelled (grace < 0:
// now).
func graceDeadline(grace time.Duration) time.Time {
	if grace < 0 {
		return time.Now()
	}
	return time.Now().Add(grace)
}

// shorten moves the deadline earlier if grace ends before it.
func (c *stopClock) shorten(grace time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := graceDeadline(grace); d.Before(c.deadline) {
		c.deadline = d
		select {
		case c.sooner <- struct{}{}:
		default: // a wake-up is already pending; it reads the new deadline
		}
	}
}

// wait returns when drained is closed, or after calling cancelAll once the
// deadline (which shorten may move) has passed.
func (c *stopClock) wait(drained <-chan struct{}, cancelAll func()) {
	for {
		c.mu.Lock()
		left := time.Until(c.deadline)
		c.mu.Unlock()
		if left <= 0 {
			cancelAll()
			return
		}
		t := time.NewTimer(left)
		select {
		case <-drained:
			t.Stop()
			return
		case <-t.C:
		case <-c.sooner:
			t.Stop()
		}
	}
}
