package front

import (
	"sync"
	"sync/atomic"
	"time"
)

// CallRecord is one ended call as the Python plugin bridge reads it
// (pgn_metrics_drain): OpenTelemetry's Python API takes histogram
// measurements one by one, so each call's numbers are handed over, in
// batches, for a thread of the bridge to record. The layout is the C API's
// (pgn.h: pgn_metrics_record): 32 bytes, little-endian on every supported
// platform.
type CallRecord struct {
	Slot       uint32 // method slot (CallMetrics.MethodNames)
	Code       uint32 // status code
	DurationNs uint64
	Sent, Rcvd uint64 // compressed bytes
}

// recordShards spreads recording over independent locks, so that calls
// ending together rarely wait for one another: a call's shard is its pooled
// state's (callMeasure.shard), and sync.Pool keeps that state per P, so
// calls on one P tend to use one shard and no lock is shared by every call.
const recordShards = 16

// shardCapacity bounds the records each shard keeps between drains; past
// it records are dropped and counted (Dropped), so a bridge that stopped
// draining costs bounded memory.
const shardCapacity = 8192

// recordQueue holds ended calls' records until DrainRecords takes them.
type recordQueue struct {
	shards  [recordShards]recordShard
	notify  chan struct{} // a token when a shard went from empty to not
	dropped atomic.Uint64
}

type recordShard struct {
	mu  sync.Mutex
	buf []CallRecord
	_   [40]byte // keeps neighbouring shards' locks off one cache line
}

func newRecordQueue() *recordQueue {
	q := &recordQueue{notify: make(chan struct{}, 1)}
	for i := range q.shards {
		q.shards[i].buf = make([]CallRecord, 0, shardCapacity)
	}
	return q
}

func (q *recordQueue) push(r CallRecord, shard uint32) {
	s := &q.shards[shard%recordShards]
	s.mu.Lock()
	if len(s.buf) == cap(s.buf) {
		s.mu.Unlock()
		q.dropped.Add(1)
		return
	}
	s.buf = append(s.buf, r)
	first := len(s.buf) == 1
	s.mu.Unlock()
	if first {
		select {
		case q.notify <- struct{}{}:
		default:
		}
	}
}

// drain moves up to len(dst) records into dst, waiting up to wait (< 0:
// no limit) or until done closes for the first one. It returns how many.
func (q *recordQueue) drain(dst []CallRecord, wait time.Duration, done <-chan struct{}) int {
	n := q.take(dst)
	if n > 0 || wait == 0 {
		return n
	}
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	for n == 0 {
		select {
		case <-q.notify:
		case <-timeout:
			return q.take(dst)
		case <-done:
			return q.take(dst)
		}
		n = q.take(dst)
	}
	return n
}

func (q *recordQueue) take(dst []CallRecord) int {
	n := 0
	for i := range q.shards {
		if n == len(dst) {
			break
		}
		s := &q.shards[i]
		s.mu.Lock()
		k := copy(dst[n:], s.buf)
		rest := copy(s.buf, s.buf[k:])
		s.buf = s.buf[:rest]
		s.mu.Unlock()
		n += k
	}
	return n
}

// DrainRecords moves up to len(dst) ended calls' records into dst, waiting
// up to wait for the first (see recordQueue.drain); 0 when per-call records
// are off.
func (c *CallMetrics) DrainRecords(dst []CallRecord, wait time.Duration, done <-chan struct{}) int {
	if c.records == nil {
		return 0
	}
	return c.records.drain(dst, wait, done)
}

// DroppedRecords counts the records dropped because nobody drained them.
func (c *CallMetrics) DroppedRecords() uint64 {
	if c.records == nil {
		return 0
	}
	return c.records.dropped.Load()
}
