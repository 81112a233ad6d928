package front

import (
	"context"
	"sync"
	"time"
)

// streamContext is a context in memory its owner already has: an h2
// stream's (h2Stream.base) and, for a driven call with a deadline, the
// call's own (call.own). context.WithTimeout and context.AfterFunc would
// cost about ten allocations a call each, and a goroutine each whenever
// what AfterFunc watches is cancelled; this costs none until someone
// waits on Done or registers an AfterFunc.
//
// It has no parent (its connection's close ends it), and values only
// through values. Its deadline is set before it is shared and never
// changes; whoever set one also ends it then (h2Conn.expire, call.own's
// timer): the context has no timer of its own. It ends only through cancel, with the error Err
// reports from then on: at its deadline (context.DeadlineExceeded), at the
// stream's or call's end (context.Canceled), with its connection's close
// (which cancels every stream it holds, h2Conn.close, and any registered
// after it closed, h2Conn.headers), or with the context it is linked to.
//
// Contexts derived from it directly, and context.AfterFunc on it, are tied
// to it through its AfterFunc method, with no goroutine. Through a
// context.WithValue of it the context package can't see that method and
// watches Done with a goroutine per derived context instead, until either
// ends: so admit takes an ordering ticket (an AfterFunc) before it adds the
// client key, and a call's own context is linked to its stream's base
// (link) and answers Value from admit's context (values).
type streamContext struct {
	end endSignal
	// deadline: zero for none. err: why it ended, written before end
	// fires and read once it has (Err).
	deadline time.Time
	err      error
	// values answers Value (nil: no values); set before it is shared.
	values context.Context
	// afterMu guards after (the functions AfterFunc registered and not yet
	// stopped or started) and child (link); both are nil once it ended.
	afterMu sync.Mutex
	after   []*streamAfterFunc
	child   *streamContext
}

// streamAfterFunc is one AfterFunc registration.
type streamAfterFunc struct{ f func() }

var _ context.Context = (*streamContext)(nil)

func (x *streamContext) Deadline() (time.Time, bool) { return x.deadline, !x.deadline.IsZero() }
func (x *streamContext) Done() <-chan struct{}       { return x.end.wait() }
func (x *streamContext) Value(key any) any {
	if x.values == nil {
		return nil
	}
	return x.values.Value(key)
}

func (x *streamContext) Err() error {
	if x.end.fired() {
		return x.err
	}
	return nil
}

// cancel ends the context with err (context.Canceled or
// context.DeadlineExceeded), then its linked child with the same error, and
// starts, each in its own goroutine, the functions registered with
// AfterFunc. Once only: it reports whether this call ended the context.
func (x *streamContext) cancel(err error) bool {
	if x.end.fired() {
		return false
	}
	x.afterMu.Lock()
	if x.end.fired() {
		x.afterMu.Unlock()
		return false
	}
	x.err = err
	x.end.fire() // under afterMu, so that AfterFunc and link see either their list or the end
	after, child := x.after, x.child
	x.after, x.child = nil, nil
	x.afterMu.Unlock()
	if child != nil {
		child.cancel(err)
	}
	for _, a := range after {
		go a.f()
	}
	return true
}

// link makes child end when x ends (at once if x has ended), on the goroutine
// that ends x: what a derived context does through AfterFunc, without its
// allocations. One child at most; a call's own context (call.own) is the
// only one.
func (x *streamContext) link(child *streamContext) {
	x.afterMu.Lock()
	if !x.end.fired() {
		x.child = child
		x.afterMu.Unlock()
		return
	}
	x.afterMu.Unlock()
	child.cancel(x.err)
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
