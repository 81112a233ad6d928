package main

import (
	"testing"
	"time"
)

// Free callers claim the slots in order, evenly spaced: 4,000 calls/s is a
// slot every 250 µs, whoever takes it.
func TestPacerSpacesSlots(t *testing.T) {
	start := time.Now()
	p := newPacer(start, 4000, 32)
	for k := 0; k < 40; k++ {
		due, skipped := p.claim(start)
		if got, want := due.Sub(start), time.Duration(k)*250*time.Microsecond; got != want || skipped != 0 {
			t.Fatalf("claim %d: due at %v, %d skipped; want %v, 0", k, got, skipped, want)
		}
	}
}

// Slots are absolute: claimed late, a slot keeps its time (no drift), and
// up to backlog overdue slots are still started, one per claim.
func TestPacerCatchesUpWithinBacklog(t *testing.T) {
	start := time.Now()
	p := newPacer(start, 1000, 4) // a slot every ms
	now := start.Add(2500 * time.Microsecond)
	for k := 0; k < 3; k++ {
		due, skipped := p.claim(now)
		if got, want := due.Sub(start), time.Duration(k)*time.Millisecond; got != want || skipped != 0 {
			t.Fatalf("claim %d: due at %v, %d skipped; want %v, 0", k, got, skipped, want)
		}
	}
}

// Beyond the backlog the oldest overdue slots are skipped, not fired back
// to back: 10.5 slots in with a backlog of 4, slots 0-6 go and 7-10 remain.
func TestPacerSkipsBeyondBacklog(t *testing.T) {
	start := time.Now()
	p := newPacer(start, 1000, 4)
	now := start.Add(10500 * time.Microsecond)
	due, skipped := p.claim(now)
	if got := due.Sub(start); got != 7*time.Millisecond || skipped != 7 {
		t.Fatalf("claim: due at %v, %d skipped; want 7ms, 7", got, skipped)
	}
	for k := 8; k <= 11; k++ {
		due, skipped := p.claim(now)
		if got, want := due.Sub(start), time.Duration(k)*time.Millisecond; got != want || skipped != 0 {
			t.Fatalf("claim of slot %d: due at %v, %d skipped; want %v, 0", k, got, skipped, want)
		}
	}
}

// The end of the window wakes a caller waiting for a distant slot, and a
// caller doesn't start an overdue slot after it.
func TestSleepUntilStops(t *testing.T) {
	stop := make(chan struct{})
	close(stop)
	for _, at := range []time.Time{time.Now().Add(time.Hour), time.Now().Add(-time.Hour)} {
		if sleepUntil(at, stop) {
			t.Errorf("sleepUntil(%v) returned true after stop closed", at)
		}
	}
	if !sleepUntil(time.Now().Add(time.Millisecond), make(chan struct{})) {
		t.Error("sleepUntil returned false without a stop")
	}
}
