package front

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
)

// FuzzMethodPath: a method path is accepted exactly when it is non-empty
// and free of control characters but tab, whatever its shape (grpcio
// serves any path a client sends).
func FuzzMethodPath(f *testing.F) {
	for _, seed := range []string{"/pkg.Svc/Method", "/a/b/c", "//x", "/svc/", "noslash", "", "/", "/a.B/C\x00", "/a\tb"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, path string) {
		want := path != "" && !strings.ContainsFunc(path, func(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f })
		if got := validMethodPath(path); got != want {
			t.Fatalf("validMethodPath(%q) = %v", path, got)
		}
	})
}

// FuzzMetadataChecks: validateMetadata accepts exactly the keys and values
// gRPC allows, and checkMetadataSize refuses by the HTTP/2 size rule,
// whatever the bytes.
func FuzzMetadataChecks(f *testing.F) {
	f.Add("x-key", "value", "k2-bin", "\x00\xff", uint32(8192))
	f.Add("grpc-status", "0", "", "", uint32(0))
	f.Add("UPPER", "v", "a", "\n", uint32(1<<20))
	f.Add("-bin", "\x00", "x", "y", uint32(8192)) // a text key for grpc-core
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, limit uint32) {
		md := metadata.MD{k1: {v1}}
		md[k2] = append(md[k2], v2)
		err := validateMetadata(metadataOf(md))
		var want error
		for k, vs := range md {
			if !validKey(k) {
				want = errors.New("bad key")
			}
			for _, v := range vs {
				if !(len(k) > 4 && strings.HasSuffix(k, "-bin")) && strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
					want = errors.New("bad value")
				}
			}
		}
		if (err == nil) != (want == nil) {
			t.Fatalf("validateMetadata(%q) = %v, want an error: %v", md, err, want != nil)
		}
		size := 0
		for k, vs := range md {
			for _, v := range vs {
				size += len(k) + len(v) + 32
			}
		}
		if err := checkMetadataSize(metadataOf(md), limit); (err == nil) != (size <= int(limit) && maxValue(md) <= max(int(limit), 16<<10)) {
			t.Fatalf("checkMetadataSize(size %d, limit %d) = %v", size, limit, err)
		}
	})
}

func validKey(k string) bool {
	if k == "" {
		return false
	}
	return strings.IndexFunc(k, func(r rune) bool {
		return !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-' || r == '_' || r == '.')
	}) < 0
}

func maxValue(md metadata.MD) int {
	n := 0
	for _, vs := range md {
		for _, v := range vs {
			n = max(n, len(v))
		}
	}
	return n
}

// FuzzParseConfig: any document either fails with a ConfigError (a
// ValueError in Python) or gives a configuration within its invariants.
func FuzzParseConfig(f *testing.F) {
	f.Add(`{"address": "[::]:0", "methods": [["/a.B/C", false]]}`)
	f.Add(`{"address": "x:1", "methods": [], "options": [["grpc.keepalive_time_ms", 10000000000000], ["grpc.max_receive_message_length", -1]]}`)
	f.Add(`{"address": "x:1", "options": [["grpc.max_metadata_size", 1e3], ["grpc.absolute_max_metadata_size", -5], ["grpc.max_concurrent_streams", 0]]}`)
	f.Add(`{"address": "x:1", "methods": [["/a.B/C", true], ["/a.B/C", false]], "maximum_concurrent_rpcs": -1}`)
	f.Fuzz(func(t *testing.T, doc string) {
		if strings.Contains(doc, `"tls"`) {
			return // TLS documents load files and keys: tls_test.go covers them
		}
		cfg, err := ParseConfig([]byte(doc))
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		l := cfg.Limits
		if cfg.Address == "" || l.MaxRecvMsgSize < 0 || l.MaxRecvMsgSize > math.MaxInt32 ||
			l.MaxSendMsgSize < 0 || l.MaxSendMsgSize > math.MaxInt32 || l.MaxConcurrentStreams == 0 ||
			l.KeepaliveTime <= 0 || l.KeepaliveTimeout <= 0 || l.HandshakeTimeout <= 0 || l.MaxHeaderListSize == 0 {
			t.Fatalf("%s gave %+v", doc, cfg)
		}
		for _, m := range cfg.Methods {
			if !validMethodPath(m.Path) {
				t.Fatalf("accepted method path %q", m.Path)
			}
		}
	})
}

// frame is one HTTP/2 frame: length, type, flags, stream, payload.
func frame(typ, flags byte, stream uint32, payload []byte) []byte {
	b := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags}
	b = binary.BigEndian.AppendUint32(b, stream)
	return append(b, payload...)
}

// literal is one HPACK header field, literal and never indexed, no Huffman.
func literal(name, value string) []byte {
	b := append([]byte{0x10, byte(len(name))}, name...)
	return append(append(b, byte(len(value))), value...)
}

func requestBlock(path string) []byte {
	var b []byte
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path},
		{":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		b = append(b, literal(kv[0], kv[1])...)
	}
	return b
}

const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// wireSeeds are FuzzWire's seeds, by what each is (framediff_test.go
// replays them against every server too).
func wireSeeds() map[string][]byte {
	msg := []byte{0, 0, 0, 0, 2, 'h', 'i'}
	return map[string][]byte{
		"a call":                      append(frame(0x1, 0x4, 1, requestBlock(sayPath)), frame(0x0, 0x1, 1, msg)...),
		"a path without a method":     frame(0x1, 0x4, 1, requestBlock("/bad")),
		"CONTINUATION never ended":    append(frame(0x1, 0x0, 1, requestBlock(sayPath)), frame(0x9, 0x0, 1, literal("x", "y"))...),
		"a call reset":                append(frame(0x1, 0x4, 1, requestBlock(sayPath)), frame(0x3, 0x0, 1, []byte{0, 0, 0, 8})...),
		"DATA on an unopened stream":  frame(0x0, 0x1, 3, []byte{1, 0, 0, 0, 9, 'x'}),
		"INITIAL_WINDOW_SIZE too big": frame(0x4, 0x0, 0, []byte{0, 4, 0xff, 0xff, 0xff, 0xff}),
		"HTTP/1.1":                    []byte("GET / HTTP/1.1\r\n\r\n"),
	}
}

// FuzzWire writes the client preface, an empty SETTINGS frame and then the
// input to a running front, reads what comes back for a moment, and checks
// that the front still answers a real call: no input may crash or wedge it.
func FuzzWire(f *testing.F) {
	for _, seed := range wireSeeds() {
		f.Add(seed)
	}
	fr, cc := startFront(f, "", echo)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(fr.Port()))
	f.Fuzz(func(t *testing.T, input []byte) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write(append(append([]byte(clientPreface), frame(0x4, 0, 0, nil)...), input...))
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, _ = io.Copy(io.Discard, conn)
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if got, err := say(ctx, cc, "alive"); err != nil || got != "alive" {
			t.Fatalf("after %q the front no longer answers: %q, %v", input, got, err)
		}
	})
}
