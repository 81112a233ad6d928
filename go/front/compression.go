package front

import (
	"compress/zlib"
	"context"
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/stats"
)

// Response compression, as grpcio does it:
//
//   - a server default: compression=, grpc.default_compression_algorithm
//     (0 none, 1 deflate, 2 gzip) or grpc.default_compression_level (0 none,
//     1 low, 2 medium, 3 high; the level wins over the algorithm and over
//     a call's own choice, and picks among what the client accepts);
//   - per call: context.set_compression(), before the initial metadata is
//     sent (SetCompression);
//   - requests in gzip and deflate are read whatever the server sends.
//
// grpc-go answers a compressed request in the request's encoding when the
// server sets none; grpcio doesn't, so every call's compressor is set
// explicitly whenever grpc-go's choice differs from the server's.
//
// disable_next_message_compression() sends one message uncompressed in a
// compressed call (sendUncompressed).
//
// Calls relayed to the fallback are answered as the fallback's server
// (given the same compression options) answers Go: the relay compresses the
// client's answer with the algorithm the fallback used, if any (its
// handler's set_compression() included), and a message that arrives
// uncompressed in a compressed answer (disable_next_message_compression(),
// or one compression wouldn't shrink) goes on uncompressed
// (relayedEncoding).

const (
	compressNone    = ""
	compressDeflate = "deflate"
	compressGzip    = "gzip"
	identity        = "identity"
)

// Compression is a server's default response compression.
type Compression struct {
	// Algorithm is compressNone, compressDeflate or compressGzip.
	Algorithm string
	// Level is grpcio's compression level, when LevelSet.
	Level    int64
	LevelSet bool
}

func (c *Compression) setAlgorithm(n int64) error {
	switch n {
	case 0:
		c.Algorithm = compressNone
	case 1:
		c.Algorithm = compressDeflate
	case 2:
		c.Algorithm = compressGzip
	default:
		return configErrorf("grpc.default_compression_algorithm must be 0 (none), 1 (deflate) or 2 (gzip), got %d", n)
	}
	return nil
}

// setAlgorithmName reads grpc.default_compression_algorithm given as a
// name, as grpc-core does: "gzip" and "deflate" (exactly so) choose one,
// any other name is ignored ("identity" is no compression, the default).
func (c *Compression) setAlgorithmName(name string) {
	switch name {
	case compressGzip, compressDeflate:
		c.Algorithm = name
	}
}

func (c *Compression) setLevel(n int64) error {
	if n < 0 || n > 3 {
		return configErrorf("grpc.default_compression_level must be 0 (none), 1 (low), 2 (medium) or 3 (high), got %d", n)
	}
	c.Level, c.LevelSet = n, true
	return nil
}

// isDefault reports a server that leaves responses uncompressed unless a
// call asks otherwise.
func (c *Compression) isDefault() bool { return c.Algorithm == compressNone && !c.LevelSet }

// forCall is the compressor name a new call answers with.
func (c *Compression) forCall(st ServerStream) string {
	if !c.LevelSet {
		return c.Algorithm
	}
	return forLevel(c.Level, st.ClientCompressors())
}

// forLevel is grpc-core's choice for a level: of gzip and deflate (in
// that order), those the client accepts; low takes the first, medium the
// middle one, high the last.
func forLevel(level int64, accepted []string) string {
	if level == 0 {
		return compressNone
	}
	var algos []string
	for _, name := range []string{compressGzip, compressDeflate} {
		for _, a := range accepted {
			if a == name {
				algos = append(algos, name)
				break
			}
		}
	}
	switch {
	case len(algos) == 0:
		return compressNone
	case level == 1:
		return algos[0]
	case level == 2:
		return algos[len(algos)/2]
	}
	return algos[len(algos)-1]
}

// applyDefault sets a new call's response compression from the server's
// default, where the transport chose otherwise (grpc-go answers a
// compressed request in the request's encoding). Cheap when there is
// nothing to do.
func (c *Compression) applyDefault(st ServerStream) {
	current := st.SendCompressor()
	if c.isDefault() && current == compressNone {
		return
	}
	if want := c.forCall(st); want != current {
		st.SetCompressor(want)
	}
}

// SetCompression sets a call's response compression (context.
// set_compression()): "", "deflate" or "gzip". A server whose default is a
// compression level ignores it, as grpcio does.
func (cs *Calls) SetCompression(id uint64, name string, how Sending) (Result, error) {
	switch name {
	case compressNone, compressDeflate, compressGzip:
	default:
		return ResultOK, configErrorf("unknown compression %q: use \"\", \"deflate\" or \"gzip\"", name)
	}
	if cs.levelSet {
		_, r := cs.table.lookup(id)
		return r, nil
	}
	return cs.post(id, op{kind: opCompression, details: name}, how), nil
}

// DisableNextCompression sends the call's next message uncompressed
// (context.disable_next_message_compression()).
func (cs *Calls) DisableNextCompression(id uint64, how Sending) Result {
	return cs.post(id, op{kind: opUncompressedNext}, how)
}

// relayedEncoding learns the encoding of the fallback's answer to one relayed
// call: the fallback connection's stats handler (encodingRecorder) stores it
// when the answer's headers arrive, before the first message is read, and
// whether each message came uncompressed, before RecvMsg returns it.
type relayedEncoding struct {
	name         atomic.Value // string
	uncompressed atomic.Bool  // the message RecvMsg returned last
}

// uncompressedInCompressed reports whether the message just received came
// uncompressed in a compressed answer: its sender turned compression off
// for it. grpc-core compresses a message only if that makes it smaller, so
// an uncompressed one has its wire length equal to its length.
func (e *relayedEncoding) uncompressedInCompressed() bool {
	name, _ := e.name.Load().(string)
	return name != "" && name != identity && e.uncompressed.Load()
}

type relayedEncodingKey struct{}

// withRelayedEncoding is ctx carrying a relayedEncoding for the backend call.
func withRelayedEncoding(ctx context.Context) (context.Context, *relayedEncoding) {
	e := &relayedEncoding{}
	return context.WithValue(ctx, relayedEncodingKey{}, e), e
}

// apply compresses the client's answer as the fallback compressed its own,
// if it did; called before the first message or header goes to the client.
func (e *relayedEncoding) apply(client ServerStream) {
	if name, _ := e.name.Load().(string); name != "" && name != identity {
		client.SetCompressor(name)
	}
}

// encodingRecorder is the fallback connection's stats.Handler: it records
// each answer's encoding into the call's relayedEncoding.
type encodingRecorder struct{}

func (encodingRecorder) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (encodingRecorder) HandleRPC(ctx context.Context, s stats.RPCStats) {
	e, ok := ctx.Value(relayedEncodingKey{}).(*relayedEncoding)
	if !ok {
		return
	}
	switch s := s.(type) {
	case *stats.InHeader:
		e.name.Store(s.Compression)
	case *stats.InPayload:
		e.uncompressed.Store(s.CompressedLength >= s.Length)
	}
}

func (encodingRecorder) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (encodingRecorder) HandleConn(context.Context, stats.ConnStats) {}

func init() {
	encoding.RegisterCompressor(&deflate{})
}

// deflate is gRPC's "deflate" encoding: zlib-wrapped DEFLATE (RFC 1950),
// as grpc-core writes it. grpc-go has only gzip built in.
type deflate struct {
	writers sync.Pool // *pooledZlibWriter
}

func (*deflate) Name() string { return compressDeflate }

func (d *deflate) Compress(w io.Writer) (io.WriteCloser, error) {
	if z, ok := d.writers.Get().(*pooledZlibWriter); ok {
		z.Reset(w)
		return z, nil
	}
	return &pooledZlibWriter{Writer: zlib.NewWriter(w), pool: &d.writers}, nil
}

func (*deflate) Decompress(r io.Reader) (io.Reader, error) {
	return zlib.NewReader(r)
}

// pooledZlibWriter goes back to its pool when closed.
type pooledZlibWriter struct {
	*zlib.Writer
	pool *sync.Pool
}

func (z *pooledZlibWriter) Close() error {
	defer z.pool.Put(z)
	return z.Writer.Close()
}
