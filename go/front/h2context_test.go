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

	x.cancel()
	x.cancel() // idempotent
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

// An untimed h2 call costs no context allocation: its stream's context is
// in the stream's memory.
func TestStreamContextAllocations(t *testing.T) {
	var x streamContext
	if n := testing.AllocsPerRun(100, func() {
		x = streamContext{}
		_ = x.Err()
		x.cancel()
		<-x.Done()
	}); n != 0 {
		t.Fatalf("%v allocations per context", n)
	}
}
