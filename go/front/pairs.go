package front

import (
	"sort"

	"google.golang.org/grpc/metadata"
)

// Metadata is response metadata as a handler set it: (key, value) pairs in
// order, a key possibly repeated, values of -bin keys raw. The order is
// kept to the wire where the transport can (h2), as grpcio keeps it;
// grpc-go's transport holds metadata in a map and sends it grouped by key.
type Metadata [][2]string

// md is response metadata m as grpc-go's map (values of a repeated key in
// order), less what the transport writes itself (leftOutOfResponse; grpc-go
// would drop most of it, but send the encodings' keys as given), with the
// values grpcio's server would send (asGRPCCoreSends).
func (m Metadata) md() metadata.MD {
	if m == nil {
		return nil
	}
	md := make(metadata.MD, len(m))
	for _, kv := range m {
		if !leftOutOfResponse(kv[0]) {
			md[kv[0]] = append(md[kv[0]], asGRPCCoreSends(kv[0], kv[1]))
		}
	}
	return md
}

// without is m less every pair of key (m itself when it has none).
func (m Metadata) without(key string) Metadata {
	for i, kv := range m {
		if kv[0] == key {
			out := append(Metadata{}, m[:i]...)
			for _, kv := range m[i+1:] {
				if kv[0] != key {
					out = append(out, kv)
				}
			}
			return out
		}
	}
	return m
}

// metadataOf is grpc-go's map as pairs, keys sorted (a map has no order
// to keep).
func metadataOf(md metadata.MD) Metadata {
	if md == nil {
		return nil
	}
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(Metadata, 0, len(md))
	for _, k := range keys {
		for _, v := range md[k] {
			out = append(out, [2]string{k, v})
		}
	}
	return out
}
