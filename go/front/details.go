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
// (pseudo-headers and the keys gRPC reserves for itself): handlers don't
// see them, and the fallback relay doesn't forward them.
func perHopKey(k string) bool {
	return strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") || k == "content-type" || k == "te"
}

// invocationMetadata is the request metadata a handler sees: what
// grpcio's invocation_metadata() returns, in the transport's order, without
// the per-hop keys.
func invocationMetadata(header [][2]string) [][2]string {
	out := make([][2]string, 0, len(header))
	for _, kv := range header {
		if !perHopKey(kv[0]) {
			out = append(out, kv)
		}
	}
	return out
}
