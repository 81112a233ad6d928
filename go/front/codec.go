package front

import (
	"fmt"

	"google.golang.org/grpc/mem"
)

// rawCodec passes message bytes through untouched, so no protobuf is parsed
// in Go: Python's generated code owns serialization.
//
// Unmarshal copies the wire buffers into a fresh slice because grpc-go frees
// (recycles) them as soon as Unmarshal returns, while the request must stay
// valid until Python has read it.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case []byte:
		return mem.BufferSlice{mem.SliceBuffer(m)}, nil
	case nil:
		return nil, nil
	default:
		return nil, fmt.Errorf("pygrpc-native codec: cannot marshal %T", v)
	}
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	dst, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("pygrpc-native codec: cannot unmarshal into %T", v)
	}
	*dst = data.Materialize()
	return nil
}
