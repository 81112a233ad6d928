package front

import (
	"strings"
	"sync"
	"time"
)

// CallDetails is what Python can ask about a call, computed on request so
// that none of it costs anything on the per-call path.
type CallDetails struct {
	Method        string
	Metadata      [][2]string // (key, value); values of -bin keys are raw bytes
	Peer          string
	Authority     string
	ClientKey     string
	HasDeadline   bool
	TimeRemaining time.Duration
	// Security is what the call's connection proves about the client.
	Security *ConnSecurity
}

// Details describes a live call, or one that ended before Python answered
// it (while its handler may still run) if it is among the last ones kept
// (endedDetails).
func (cs *Calls) Details(id uint64) (CallDetails, Result) {
	c, r := cs.table.lookup(id)
	if r == ResultEnded {
		if d, ok := cs.endedDetails.get(id); ok {
			return d, ResultOK
		}
	}
	if r != ResultOK {
		return CallDetails{}, r
	}
	d, deadline := detailsOf(c)
	if !deadline.IsZero() {
		d.HasDeadline, d.TimeRemaining = true, max(time.Until(deadline), 0)
	}
	return d, ResultOK
}

// detailsOf is c's details but the time left, and its deadline (zero:
// none). c is live, or ending on the goroutine that calls this.
func detailsOf(c *call) (CallDetails, time.Time) {
	d := CallDetails{Method: c.path, ClientKey: c.clientKey}
	if c.conn != nil {
		d.Peer = c.conn.peer
	}
	d.Security = c.st.Security()
	header := c.st.Header()
	for _, kv := range header {
		if kv[0] == ":authority" {
			d.Authority = kv[1]
			break
		}
	}
	d.Metadata = invocationMetadata(header)
	deadline, _ := c.ctx.Deadline()
	return d, deadline
}

// endedDetails keeps the details of the last calls that ended before
// Python answered them (client cancel, deadline, reset, abort): their
// handlers may still run, and grpcio's contexts still answer
// invocation_metadata(), peer(), auth_context() and time_remaining() then.
// Only such calls pay for it (a call Python answers is forgotten at once),
// and a fixed ring bounds what is kept: a handler that asks after
// endedKept more such calls have ended gets nothing (Python then reports
// no metadata and no peer).
type endedDetails struct {
	mu   sync.Mutex
	ring [endedKept]endedCall
}

const endedKept = 256

type endedCall struct {
	id       uint64
	d        CallDetails
	deadline time.Time
}

// keep records the details of c, which is ending; on the goroutine that
// ends it, before its stream is released. The header's strings are
// copied: a transport may reuse their storage.
func (e *endedDetails) keep(c *call) {
	d, deadline := detailsOf(c)
	d.Authority = strings.Clone(d.Authority)
	for i, kv := range d.Metadata {
		d.Metadata[i] = [2]string{strings.Clone(kv[0]), strings.Clone(kv[1])}
	}
	e.mu.Lock()
	e.ring[c.id%endedKept] = endedCall{id: c.id, d: d, deadline: deadline}
	e.mu.Unlock()
}

// get returns the kept details of call id, with the time its deadline has
// left now.
func (e *endedDetails) get(id uint64) (CallDetails, bool) {
	e.mu.Lock()
	k := e.ring[id%endedKept]
	e.mu.Unlock()
	if k.id != id {
		return CallDetails{}, false
	}
	d := k.d
	if !k.deadline.IsZero() {
		d.HasDeadline, d.TimeRemaining = true, max(time.Until(k.deadline), 0)
	}
	return d, true
}

// perHopKey reports a metadata key that HTTP/2 or gRPC set for one hop
// (pseudo-headers and the keys gRPC reserves for itself): the fallback
// relay doesn't forward them.
func perHopKey(k string) bool {
	return strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") || k == "content-type" || k == "te"
}

// hiddenFromHandlers reports a request metadata key that grpcio's server
// acts on and never shows a handler: pseudo-headers, content-type, te,
// and the keys of gRPC's own (the deadline, the encodings, the status,
// tracing, load reports, Envoy's peer metadata). Other keys are the
// handler's, grpc- ones included (grpc-status-details-bin, a key of the
// application's own, and the retry keys: see grpcCoreFields).
func hiddenFromHandlers(k string) bool {
	if strings.HasPrefix(k, ":") {
		return true
	}
	switch k {
	case "content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding", "grpc-internal-encoding-request",
		"grpc-status", "grpc-message", "grpc-trace-bin", "grpc-tags-bin", "grpc-server-stats-bin", "lb-cost-bin",
		"endpoint-load-metrics-bin", "x-envoy-peer-metadata":
		return true
	}
	return false
}

// grpcCoreFields are the request keys that grpc-core keeps in fields of
// their own rather than in its list of metadata: grpcio's
// invocation_metadata() gives them first, in this order, one value each
// (the last one received), numbers as grpc-core parsed them; then every
// other key, in the transport's order.
var grpcCoreFields = [...]string{
	"grpc-previous-rpc-attempts", "grpc-retry-pushback-ms", "user-agent", "host", "lb-token", "traceparent",
}

// grpcCoreField is k's index in grpcCoreFields, or -1.
func grpcCoreField(k string) int {
	for i, f := range grpcCoreFields {
		if k == f {
			return i
		}
	}
	return -1
}

// invocationMetadata is the request metadata a handler sees: what
// grpcio's invocation_metadata() returns, in its order.
func invocationMetadata(header [][2]string) [][2]string {
	var fields [len(grpcCoreFields)]struct {
		value string
		seen  bool
	}
	for _, kv := range header {
		if i := grpcCoreField(kv[0]); i >= 0 {
			fields[i].value, fields[i].seen = kv[1], true
		}
	}
	out := make([][2]string, 0, len(header))
	for i, f := range fields {
		if f.seen {
			k := grpcCoreFields[i]
			out = append(out, [2]string{k, asGRPCCoreSends(k, f.value)})
		}
	}
	for _, kv := range header {
		if !hiddenFromHandlers(kv[0]) && grpcCoreField(kv[0]) < 0 {
			out = append(out, kv)
		}
	}
	return out
}
