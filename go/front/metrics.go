package front

import (
	"runtime"
	"sync/atomic"
)

// metrics are the front's counters. Every field is updated with atomics so
// that reading them never stops the server.
type metrics struct {
	callsStarted          atomic.Uint64
	callsCompleted        atomic.Uint64
	callsCancelled        atomic.Uint64
	callsDeadlineExceeded atomic.Uint64
	callsRefused          atomic.Uint64
	callsActive           atomic.Int64
	batchesDelivered      atomic.Uint64
	eventsDelivered       atomic.Uint64
	connections           atomic.Int64
	connectionsTotal      atomic.Uint64
	bytesIn               atomic.Uint64
	bytesOut              atomic.Uint64
	callsProxied          atomic.Uint64
}

// Metric is one named counter, as Front.Metrics reports it.
type Metric struct {
	Name  string
	Value int64
}

// MetricNames lists the keys Front.Metrics returns, in order. They are a
// public contract (docs/low-level-api.md): never rename or remove one.
var MetricNames = []string{
	"calls_started",           // calls queued for Python (EVENT_CALL or EVENT_LOOKUP), including those that ended before Python took their event; each ends in exactly one of the next three
	"calls_completed",         // calls Python finished (any status) or routed to the fallback
	"calls_cancelled",         // calls the client or Python (cancel) cancelled, or that died with their connection or the server
	"calls_deadline_exceeded", // calls whose deadline passed before Python finished them
	"calls_refused",           // calls refused before reaching Python (never started): bad token, unknown method, limits
	"calls_active",            // calls started and not yet ended
	"events_queued",           // events waiting for recv_batch
	"batches_delivered",       // non-empty batches returned by recv_batch
	"events_delivered",        // events returned by recv_batch
	"connections_active",      // open client connections
	"connections_total",       // connections accepted since start
	"bytes_in",                // bytes read from client connections
	"bytes_out",               // bytes written to client connections
	"calls_proxied",           // calls relayed to the fallback server
	"goroutines",              // goroutines in the process (Go's runtime.NumGoroutine), for leak checks
}

// countOutcome counts how a started call ended.
func (m *metrics) countOutcome(o outcome) {
	switch o {
	case outcomeCompleted:
		m.callsCompleted.Add(1)
	case outcomeCancelled:
		m.callsCancelled.Add(1)
	case outcomeDeadline:
		m.callsDeadlineExceeded.Add(1)
	}
}

func (m *metrics) snapshot(queued int) []Metric {
	values := []int64{
		int64(m.callsStarted.Load()),
		int64(m.callsCompleted.Load()),
		int64(m.callsCancelled.Load()),
		int64(m.callsDeadlineExceeded.Load()),
		int64(m.callsRefused.Load()),
		m.callsActive.Load(),
		int64(queued),
		int64(m.batchesDelivered.Load()),
		int64(m.eventsDelivered.Load()),
		m.connections.Load(),
		int64(m.connectionsTotal.Load()),
		int64(m.bytesIn.Load()),
		int64(m.bytesOut.Load()),
		int64(m.callsProxied.Load()),
		int64(runtime.NumGoroutine()),
	}
	out := make([]Metric, len(values))
	for i, v := range values {
		out[i] = Metric{Name: MetricNames[i], Value: v}
	}
	return out
}
