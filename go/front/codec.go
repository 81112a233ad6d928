package front

import (
	"fmt"

	"google.golang.org/grpc/mem"
)

// rawCodec passes message bytes through untouched, so no protobuf is parsed
// in Go: Python's generated code owns serialization.
//
// Messages stay in grpc-go's pooled buffers (mem.BufferSlice) both ways, so
// a request is copied once, into the bytes Python reads, and a reply once,
// out of Python's bytes. Unmarshal takes a reference on the wire buffers,
// since grpc-go frees its own as soon as Unmarshal returns; whoever holds
// the request frees it (Event.Release).
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case mem.BufferSlice:
		return m, nil
	case nil:
		return nil, nil
	default:
		return nil, fmt.Errorf("pygrpc-native codec: cannot marshal %T", v)
	}
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch dst := v.(type) {
	case *mem.BufferSlice:
		data.Ref()
		*dst = data
	default:
		return fmt.Errorf("pygrpc-native codec: cannot unmarshal into %T", v)
	}
	return nil
}
