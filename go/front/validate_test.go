package front

import "testing"

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
