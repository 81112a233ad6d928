package front

import (
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
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
	p, _ := peer.FromContext(c.ctx)
	d.Security = connSecurity(p, c.conn)
	md, _ := metadata.FromIncomingContext(c.ctx)
	if a := md.Get(":authority"); len(a) > 0 {
		d.Authority = a[0]
	}
	d.Metadata = invocationMetadata(md)
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

// invocationMetadata is the request metadata a handler sees: what grpcio's
// invocation_metadata() returns, without the per-hop keys. grpc-go keeps
// metadata in a map, so keys come back sorted; repeated keys keep their
// order.
func invocationMetadata(md metadata.MD) [][2]string {
	keys := make([]string, 0, len(md))
	for k := range md {
		if !perHopKey(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out [][2]string
	for _, k := range keys {
		for _, v := range md[k] {
			out = append(out, [2]string{k, v})
		}
	}
	return out
}
