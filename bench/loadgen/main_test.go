package main

import (
	"testing"
	"time"
)

// The callers' schedules interleave into one evenly spaced stream of starts:
// with 4,000 calls/s over 32 callers, caller i starts at i x 250 µs and then
// every 8 ms.
func TestPacerStaggersCallers(t *testing.T) {
	start := time.Now()
	for _, i := range []int{0, 1, 31} {
		p := newPacer(start, 4000, i, 32)
		if got, want := p.next.Sub(start), time.Duration(i)*250*time.Microsecond; got != want {
			t.Errorf("caller %d: first slot at %v, want %v", i, got, want)
		}
		if p.interval != 8*time.Millisecond {
			t.Errorf("caller %d: interval %v, want 8ms", i, p.interval)
		}
	}
}

// Slots are absolute: after k waits the next slot is first + k*interval
// whatever the wake-ups cost (no drift), and the k-th start is never before
// its slot (no burst).
func TestPacerKeepsItsSchedule(t *testing.T) {
	start := time.Now()
	p := newPacer(start, 500, 0, 1) // a slot every 2 ms
	for k := 0; k < 5; k++ {
		if _, ok := p.wait(nil); !ok {
			t.Fatal("wait returned not ok without a stop")
		}
		if early := time.Duration(k)*2*time.Millisecond - time.Since(start); early > 0 {
			t.Fatalf("start %d came %v before its slot", k, early)
		}
	}
	if got, want := p.next.Sub(start), 10*time.Millisecond; got != want {
		t.Errorf("next slot at %v after 5 waits, want %v", got, want)
	}
}

// A caller 10.5 slots behind skips the 10 whole slots it missed and starts at
// once, instead of firing them back to back.
func TestPacerSkipsMissedSlots(t *testing.T) {
	start := time.Now().Add(-10500 * time.Millisecond)
	p := newPacer(start, 1, 0, 1) // a slot every second
	skipped, ok := p.wait(nil)
	if !ok || skipped != 10 {
		t.Fatalf("wait() = %d, %v; want 10 skipped, ok", skipped, ok)
	}
	if got, want := p.next.Sub(start), 11*time.Second; got != want {
		t.Errorf("next slot at %v, want %v", got, want)
	}
}

// The end of the window wakes a caller waiting for a distant slot.
func TestPacerStops(t *testing.T) {
	p := newPacer(time.Now().Add(time.Hour), 1, 0, 1)
	stop := make(chan struct{})
	close(stop)
	if _, ok := p.wait(stop); ok {
		t.Fatal("wait returned ok after stop closed")
	}
}
