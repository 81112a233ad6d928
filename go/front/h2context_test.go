package front

import (
	"context"
	"testing"
	"time"
)

// A stream's own context behaves as context.WithCancel's would for the
// uses the front makes of it: Done and Err before and after cancel,
// contexts derived from it, context.AfterFunc and its stop.
func TestStreamContext(t *testing.T) {
	var x streamContext
	if x.Err() != nil {
		t.Fatalf("Err before cancel = %v", x.Err())
	}
	if _, ok := x.Deadline(); ok {
		t.Fatal("an untimed stream's context has a deadline")
	}
	done := x.Done()
	child, stopChild := context.WithCancel(&x)
	defer stopChild()
	valued := context.WithValue(&x, clientKeyCtx{}, "k")
	ran := make(chan struct{})
	context.AfterFunc(&x, func() { close(ran) })
	never := make(chan struct{})
	stop := context.AfterFunc(&x, func() { close(never) })
	if !stop() {
		t.Fatal("stop before cancel reported that f had started")
	}
	select {
	case <-done:
		t.Fatal("Done closed before cancel")
	default:
	}

	if !x.cancel(context.Canceled) || x.cancel(context.DeadlineExceeded) {
		t.Fatal("cancel did not report ending the context once only")
	}
	for name, ch := range map[string]<-chan struct{}{"Done": done, "Done after": x.Done(), "child": child.Done(), "valued": valued.Done(), "AfterFunc": ran} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s not closed after cancel", name)
		}
	}
	if x.Err() != context.Canceled || child.Err() != context.Canceled {
		t.Fatalf("Err after cancel = %v, child %v", x.Err(), child.Err())
	}
	select {
	case <-never:
		t.Fatal("a stopped AfterFunc ran")
	case <-time.After(50 * time.Millisecond):
	}
	late := make(chan struct{})
	if context.AfterFunc(&x, func() { close(late) })() {
		t.Fatal("stop after cancel reported that it kept f from running")
	}
	select {
	case <-late:
	case <-time.After(5 * time.Second):
		t.Fatal("an AfterFunc registered after cancel did not run")
	}
}

// An h2 call costs no context allocation: its stream's context is in the
// stream's memory (and a deadline's timer is the caller's).
func TestStreamContextAllocations(t *testing.T) {
	var x streamContext
	if n := testing.AllocsPerRun(100, func() {
		x = streamContext{}
		_ = x.Err()
		x.cancel(context.Canceled)
		<-x.Done()
	}); n != 0 {
		t.Fatalf("%v allocations per context", n)
	}
}

// A deadline and a linked child: the child ends with its parent, with the
// parent's error, at once if the parent has already ended; a child that
// ended first stays as it was.
func TestStreamContextDeadlineAndLink(t *testing.T) {
	var parent, child, late, first streamContext
	dl := time.Now().Add(time.Hour)
	parent.deadline = dl
	if got, ok := parent.Deadline(); !ok || !got.Equal(dl) {
		t.Fatalf("Deadline = %v, %v; want %v", got, ok, dl)
	}
	parent.link(&child)
	if child.Err() != nil {
		t.Fatal("a child ended before its parent")
	}
	parent.cancel(context.DeadlineExceeded)
	if parent.Err() != context.DeadlineExceeded || child.Err() != context.DeadlineExceeded {
		t.Fatalf("after the deadline: parent %v, child %v; want DeadlineExceeded for both", parent.Err(), child.Err())
	}
	parent.link(&late)
	if late.Err() != context.DeadlineExceeded {
		t.Fatalf("linked to an ended parent: %v, want its error", late.Err())
	}
	var p2 streamContext
	p2.link(&first)
	first.cancel(context.Canceled)
	p2.cancel(context.DeadlineExceeded)
	if first.Err() != context.Canceled {
		t.Fatalf("a child that ended first: %v, want Canceled", first.Err())
	}
}
