package front

import (
	"strings"
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

// Details describes a live call.
func (cs *Calls) Details(id uint64) (CallDetails, Result) {
	c, r := cs.table.lookup(id)
	if r != ResultOK {
		return CallDetails{}, r
	}
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
	if dl, ok := c.ctx.Deadline(); ok {
		d.HasDeadline, d.TimeRemaining = true, max(time.Until(dl), 0)
	}
	return d, ResultOK
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
