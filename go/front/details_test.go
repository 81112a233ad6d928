package front

import (
	"reflect"
	"testing"
)

// TestInvocationMetadataInGRPCIOsOrder: what a handler sees of the request
// metadata, as grpcio 1.85's invocation_metadata() shows it to a raw
// client's keys: the keys grpc-core keeps apart first, in its order, one
// value each (the last), numbers as parsed; gRPC's own keys left out; the
// rest as received.
func TestInvocationMetadataInGRPCIOsOrder(t *testing.T) {
	header := [][2]string{
		{":path", "/s/m"}, {"z", "1"}, {"traceparent", "t"}, {"lb-token", "l"}, {"host", "h"},
		{"user-agent", "first"}, {"grpc-retry-pushback-ms", "007"}, {"grpc-previous-rpc-attempts", " +3 "},
		{"x-envoy-peer-metadata", "p"}, {"grpc-trace-bin", "\x00"}, {"user-agent", "last"}, {"a", "2"}, {"z", "3"},
	}
	want := [][2]string{
		{"grpc-previous-rpc-attempts", "3"}, {"grpc-retry-pushback-ms", "7"}, {"user-agent", "last"}, {"host", "h"},
		{"lb-token", "l"}, {"traceparent", "t"}, {"z", "1"}, {"a", "2"}, {"z", "3"},
	}
	if got := invocationMetadata(header); !reflect.DeepEqual(got, want) {
		t.Fatalf("invocationMetadata:\n got  %q\n want %q", got, want)
	}
	if got := invocationMetadata([][2]string{{"b", "1"}, {"a", "2"}}); !reflect.DeepEqual(got, [][2]string{{"b", "1"}, {"a", "2"}}) {
		t.Fatalf("plain keys moved: %q", got)
	}
}

// TestPythonBytesRepr: the path in grpcio's status for a unary call with no
// request is written as Python's repr() of bytes writes it.
func TestPythonBytesRepr(t *testing.T) {
	for in, want := range map[string]string{
		"/s/m":         `b'/s/m'`,
		"/s/it's":      `b"/s/it's"`,
		`/s/'"`:        `b'/s/\'"'`,
		"/s/\\\t\n":    `b'/s/\\\t\n'`,
		"/s/\x00é\x7f": `b'/s/\x00\xc3\xa9\x7f'`,
	} {
		if got := pythonBytesRepr(in); got != want {
			t.Errorf("pythonBytesRepr(%q) = %s, want %s", in, got, want)
		}
	}
}
