package front

import "sync/atomic"

// slots are the places maximum_concurrent_rpcs allows: a call takes one
// before it starts (or is refused with RESOURCE_EXHAUSTED) and gives it back
// when it ends, or, on a front that holds slots, when both the call has
// ended and Python's handler has returned (Calls.HandlerDone). Taking is
// one compare-and-swap on the count, so concurrent calls can never run
// more than the limit between a check and a start.
type slots struct {
	limit int64 // 0: no limit, and nothing is counted; negative: no places at all
	used  atomic.Int64
}

// take takes a place; false when all are taken.
func (s *slots) take() bool {
	if s.limit <= 0 {
		return s.limit == 0
	}
	for {
		n := s.used.Load()
		if n >= s.limit {
			return false
		}
		if s.used.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// full reports whether take would refuse now (a later take may not).
func (s *slots) full() bool {
	return s.limit < 0 || s.limit > 0 && s.used.Load() >= s.limit
}

// give gives a place back.
func (s *slots) give() {
	if s.limit > 0 {
		s.used.Add(-1)
	}
}
