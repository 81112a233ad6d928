package front

import (
	"bytes"
	"compress/zlib"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
)

func TestDeflateIsZlibAsGrpcCoreWritesIt(t *testing.T) {
	c := encoding.GetCompressor("deflate")
	if c == nil {
		t.Fatal("no deflate compressor registered")
	}
	msg := []byte(strings.Repeat("deflate ", 100))
	var buf bytes.Buffer
	for range 2 { // the second round uses a pooled writer
		buf.Reset()
		w, err := c.Compress(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(msg)
		w.Close()
		zr, err := zlib.NewReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("not zlib: %v", err)
		}
		if got, _ := io.ReadAll(zr); !bytes.Equal(got, msg) {
			t.Fatal("zlib reads back something else")
		}
		r, err := c.Decompress(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := io.ReadAll(r); !bytes.Equal(got, msg) {
			t.Fatal("deflate reads back something else")
		}
	}
}

func TestDeflateRequestsAndCompressedAnswers(t *testing.T) {
	_, cc := startFront(t, `, "options": [["grpc.default_compression_algorithm", 2]]`, echo)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if got, err := say(ctx, cc, "hello", grpc.UseCompressor("deflate")); err != nil || got != "hello" {
		t.Fatalf("deflate request: %q, %v", got, err)
	}
}

func TestCompressionLevelPicksAmongAcceptedAlgorithms(t *testing.T) {
	for _, c := range []struct {
		level    int64
		accepted string
		want     string
	}{
		{0, "gzip,deflate", ""},
		{1, "gzip,deflate", "gzip"},
		{2, "gzip,deflate", "deflate"},
		{3, "gzip,deflate", "deflate"},
		{3, "gzip", "gzip"},
		{1, "identity", ""},
	} {
		if got := forLevel(c.level, strings.Split(c.accepted, ",")); got != c.want {
			t.Errorf("level %d, client accepts %s: %q, want %q", c.level, c.accepted, got, c.want)
		}
	}
}
