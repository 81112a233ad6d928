package front

import (
	"context"
	"sync"
	"time"
)

// streamContext is the context of an h2 stream without a deadline, in the
// stream's own memory. context.WithCancel would cost two allocations per
// call (the context and its done channel); this one costs none until
// someone waits on Done or registers an AfterFunc.
//
// It has no deadline and no values (its connection's context, the parent
// it stands in for, has neither). It is cancelled only through cancel:
// by the stream's end (h2Stream.endContext) and by its connection's close,
// which cancels every stream it holds (h2Conn.close) and any stream
// registered after it closed (h2Conn.headers). Err is context.Canceled
// from the moment Done's channel is closed.
//
// Contexts derived from it directly, and context.AfterFunc on it, are tied
// to it through its AfterFunc method, with no goroutine. Through a
// context.WithValue of it (admit's client key, with bearer tokens) the
// context package can't see that method and watches Done with a goroutine
// per derived context instead, until either ends: every stream's context
// ends (endContext on each way a stream ends), so none is left behind.
type streamContext struct {
	end endSignal
	// afterMu guards after: the functions AfterFunc registered and not
	// yet stopped or started; nil once cancel has run.
	afterMu sync.Mutex
	after   []*streamAfterFunc
}

// streamAfterFunc is one AfterFunc registration.
type streamAfterFunc struct{ f func() }

var _ context.Context = (*streamContext)(nil)

func (x *streamContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (x *streamContext) Done() <-chan struct{}       { return x.end.wait() }
func (x *streamContext) Value(any) any               { return nil }

func (x *streamContext) Err() error {
	if x.end.fired() {
		return context.Canceled
	}
	return nil
}

// cancel ends the context and starts, each in its own goroutine, the
// functions registered with AfterFunc; once only, later calls do nothing.
func (x *streamContext) cancel() {
	if x.end.fired() {
		return
	}
	x.afterMu.Lock()
	if x.end.fired() {
		x.afterMu.Unlock()
		return
	}
	x.end.fire() // under afterMu, so that AfterFunc sees either the list or the end
	after := x.after
	x.after = nil
	x.afterMu.Unlock()
	for _, a := range after {
		go a.f()
	}
}

// AfterFunc runs f in its own goroutine once the context ends (at once if
// it has); stop unregisters it and reports whether that kept f from
// running. The context package uses it to tie derived contexts (and
// context.AfterFunc) to this one without a goroutine of its own.
func (x *streamContext) AfterFunc(f func()) (stop func() bool) {
	a := &streamAfterFunc{f: f}
	x.afterMu.Lock()
	if x.end.fired() {
		x.afterMu.Unlock()
		go f()
		return func() bool { return false }
	}
	x.after = append(x.after, a)
	x.afterMu.Unlock()
	return func() bool {
		x.afterMu.Lock()
		defer x.afterMu.Unlock()
		for i, b := range x.after {
			if b == a {
				x.after = append(x.after[:i], x.after[i+1:]...)
				return true
			}
		}
		return false
	}
}
