package front

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpc.compression_enabled_algorithms_bitset: the request encodings a
// server accepts (bit 0 identity, 1 deflate, 2 gzip; all by default). A
// call whose request encoding is disabled is refused before it reaches a
// handler with UNIMPLEMENTED, in grpcio's words; identity can't be
// disabled, as in grpcio.

// DisabledCompression is the set of request encodings the bitset turns
// off; nil: none.
type DisabledCompression map[string]bool

func disabledByBitset(bits int64) DisabledCompression {
	d := DisabledCompression{}
	if bits&(1<<1) == 0 {
		d[compressDeflate] = true
	}
	if bits&(1<<2) == 0 {
		d[compressGzip] = true
	}
	return d
}

// dropDisabled turns a server default algorithm the bitset disables into
// none, as grpc-core does ("default compression algorithm ... not enabled:
// switching to none"). A handler's set_compression() still compresses with
// it, as in grpcio.
func (c *Compression) dropDisabled(d DisabledCompression) {
	if d[c.Algorithm] {
		c.Algorithm = compressNone
	}
}

// acceptEncoding is the grpc-accept-encoding a server sends in its
// response headers, as grpc-core sends it: the encodings it takes, in
// grpc-core's order.
func (d DisabledCompression) acceptEncoding() string {
	accepted := "identity"
	for _, name := range []string{compressDeflate, compressGzip} {
		if !d[name] {
			accepted += ", " + name
		}
	}
	return accepted
}

// check refuses a call whose request encoding (grpc-encoding) is
// disabled.
func (d DisabledCompression) check(encoding string) error {
	if d[encoding] {
		return status.Error(codes.Unimplemented, fmt.Sprintf("Compression algorithm '%s' is disabled.", encoding))
	}
	return nil
}
