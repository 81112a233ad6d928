package front

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/status"
)

// TestAsGRPCCoreSends: the keys grpc-core parses go in its canonical
// form, a value it can't parse as its default; every other key as given.
func TestAsGRPCCoreSends(t *testing.T) {
	zeroCost := "\x00\x00\x00\x00\x00\x00\x00\x00"
	for _, c := range []struct{ k, v, want string }{
		{"grpc-previous-rpc-attempts", "3", "3"},
		{"grpc-previous-rpc-attempts", " +3 ", "3"},
		{"grpc-previous-rpc-attempts", "007", "7"},
		{"grpc-previous-rpc-attempts", "4294967295", "4294967295"},
		{"grpc-previous-rpc-attempts", "4294967296", "0"},
		{"grpc-previous-rpc-attempts", "-3", "0"},
		{"grpc-previous-rpc-attempts", "0x10", "0"},
		{"grpc-previous-rpc-attempts", "", "0"},
		{"grpc-retry-pushback-ms", "100", "100"},
		{"grpc-retry-pushback-ms", "-5", "-5"},
		{"grpc-retry-pushback-ms", "9223372036854775807", "9223372036854775807"},
		{"grpc-retry-pushback-ms", "9223372036854775808", "-9223372036854775808"},
		{"grpc-retry-pushback-ms", "1_000", "-9223372036854775808"},
		{"grpc-retry-pushback-ms", "soon", "-9223372036854775808"},
		{"lb-cost-bin", "\x01", zeroCost},
		{"lb-cost-bin", zeroCost + "name", zeroCost + "name"},
		{"x-count", "abc", "abc"},
		{"grpc-retry-pushback-ms-bin", "abc", "abc"},
	} {
		if got := asGRPCCoreSends(c.k, c.v); got != c.want {
			t.Errorf("asGRPCCoreSends(%q, %q) = %q, want %q", c.k, c.v, got, c.want)
		}
	}
}

// TestMetadataSizeNamesFieldsUpToTheLimit: grpcio's details list the fields
// in the order they came, up to the one that crossed the limit, so they stay
// short however many fields a client sends (ours listed every field, sorted:
// with thousands of keys the details outgrew the client's own limit).
func TestMetadataSizeNamesFieldsUpToTheLimit(t *testing.T) {
	md := Metadata{{"zz", strings.Repeat("a", 60)}, {"aa", strings.Repeat("b", 60)}, {"mm", "c"}, {"after", "d"}}
	err := checkMetadataSize(md, 150)
	want := "received metadata size exceeds hard limit (188 vs. 150);  zz:94B aa:94B"
	if status.Convert(err).Message() != want {
		t.Fatalf("details %q, want %q", status.Convert(err).Message(), want)
	}
	var many Metadata
	for i := 0; i < 5000; i++ {
		many = append(many, [2]string{fmt.Sprintf("k%d", i), "v"})
	}
	if n := len(status.Convert(checkMetadataSize(many, 16<<10)).Message()); n > 8<<10 {
		t.Fatalf("details of %d bytes for 5,000 fields", n)
	}
}
