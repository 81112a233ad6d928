package front

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"address": "[::]:0", "methods": [["/a.B/C", false]]}`))
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Limits
	if l.MaxRecvMsgSize != 4<<20 || l.MaxSendMsgSize != math.MaxInt32 || l.MaxConcurrentStreams != 1024 ||
		l.MaxHeaderListSize != 16<<10 || l.HandshakeTimeout != 120*time.Second || l.ReusePort {
		t.Fatalf("defaults: %+v", l)
	}
}

func TestParseConfigOptions(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"address": "x:1", "methods": [], "options": [
		["grpc.max_receive_message_length", -1], ["grpc.max_send_message_length", 100],
		["grpc.keepalive_time_ms", 1000], ["grpc.keepalive_timeout_ms", "not an int"],
		["grpc.max_metadata_size", 32768], ["grpc.so_reuseport", 1], ["grpc.some_client_option", 5]]}`))
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Limits
	if l.MaxRecvMsgSize != math.MaxInt32 || l.MaxSendMsgSize != 100 || l.KeepaliveTime != time.Second ||
		l.KeepaliveTimeout != 20*time.Second || l.MaxHeaderListSize != 40960 || !l.ReusePort {
		t.Fatalf("limits: %+v", l)
	}
}

func TestParseConfigFlowControlOptions(t *testing.T) {
	for _, c := range []struct {
		options string
		window  uint32
		fixed   bool
	}{
		{``, 1 << 20, false},
		{`["grpc.http2.bdp_probe", 0]`, 65535, true},
		{`["grpc.http2.bdp_probe", 0], ["grpc.http2.lookahead_bytes", 16384]`, 16384, true},
		{`["grpc.http2.lookahead_bytes", 16384], ["grpc.http2.bdp_probe", 0]`, 16384, true},
		{`["grpc.http2.bdp_probe", 1], ["grpc.http2.lookahead_bytes", 16384]`, 1 << 20, false},
		{`["grpc.http2.lookahead_bytes", 8388608]`, 8 << 20, false},
		{`["grpc.http2.bdp_probe", 0], ["grpc.http2.lookahead_bytes", 1099511627776]`, math.MaxInt32, true},
		{`["grpc.http2.bdp_probe", 0], ["grpc.http2.lookahead_bytes", -5]`, 65535, true},
		{`["grpc.http2.bdp_probe", "0"]`, 1 << 20, false},
	} {
		cfg, err := ParseConfig([]byte(`{"address": "x:1", "methods": [], "options": [` + c.options + `]}`))
		if err != nil {
			t.Fatal(err)
		}
		if l := cfg.Limits; l.StreamWindow != c.window || l.FixedWindow != c.fixed {
			t.Errorf("%s: window %d fixed %v, want %d %v", c.options, l.StreamWindow, l.FixedWindow, c.window, c.fixed)
		}
	}
}

func TestParseConfigConnectionAndCompressionOptions(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"address": "x:1", "methods": [], "options": [
		["grpc.max_connection_age_ms", 1500], ["grpc.max_connection_age_grace_ms", 0],
		["grpc.max_connection_idle_ms", -1], ["grpc.max_allowed_incoming_connections", 3],
		["grpc.default_compression_algorithm", 2]]}`))
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Limits
	if l.MaxConnectionAge != 1500*time.Millisecond || l.MaxConnectionAgeGrace != time.Nanosecond ||
		l.MaxConnectionIdle != infinity || l.MaxConnections != 3 || l.Compression.Algorithm != "gzip" || l.Compression.LevelSet {
		t.Fatalf("limits: %+v", l)
	}
	for n, want := range map[int64]time.Duration{-1000: time.Nanosecond, 0: time.Nanosecond, 250: 250 * time.Millisecond} {
		cfg, err := ParseConfig([]byte(fmt.Sprintf(`{"address": "x:1", "methods": [], "options": [
			["grpc.max_connection_age_grace_ms", %d], ["grpc.server_handshake_timeout_ms", %d]]}`, n, n)))
		if err != nil {
			t.Fatal(err)
		}
		if g, h := cfg.Limits.MaxConnectionAgeGrace, cfg.Limits.HandshakeTimeout; g != want || h != want {
			t.Errorf("grace and handshake timeout %d ms: %v, %v; want %v", n, g, h, want)
		}
	}
	for value, want := range map[string]string{`"deflate"`: "deflate", `"gzip"`: "gzip", `"identity"`: compressNone, `"GZIP"`: compressNone, `"2"`: compressNone} {
		cfg, err := ParseConfig([]byte(`{"address": "x:1", "methods": [], "options": [["grpc.default_compression_algorithm", ` + value + `]]}`))
		if err != nil || cfg.Limits.Compression.Algorithm != want {
			t.Errorf("algorithm %s: %v, %v; want %q", value, cfg, err, want)
		}
	}
	for _, opt := range []string{`["grpc.default_compression_algorithm", 3]`, `["grpc.default_compression_level", 7]`} {
		_, err := ParseConfig([]byte(`{"address": "x:1", "methods": [], "options": [` + opt + `]}`))
		if _, ok := err.(*ConfigError); !ok || !strings.Contains(err.Error(), "compression") {
			t.Errorf("%s: %v", opt, err)
		}
	}
}

func TestParseConfigRefusesBadMethods(t *testing.T) {
	for _, methods := range []string{`[["", false]]`, `[["/a.B/C\n", false]]`, `[["/a.B/C", "yes"]]`, `[["/a.B/C", false], ["/a.B/C", true]]`} {
		if _, err := ParseConfig([]byte(`{"address": "x:1", "methods": ` + methods + `}`)); err == nil {
			t.Errorf("%s accepted", methods)
		}
	}
	// Any path a client can send is served by grpcio: empty names, no
	// leading "/", no method part.
	if _, err := ParseConfig([]byte(`{"address": "x:1", "methods": [["//C", false], ["/a.B/", false], ["nope", false], ["/a.B", false]]}`)); err != nil {
		t.Errorf("a path grpcio serves refused: %v", err)
	}
}

// TestSettingsTimeout: grpc.http2.settings_timeout when given, else
// grpc-core's default: twice the keepalive timeout, at least a minute
// (measured on grpcio 1.85.1: 60 s by default, 70 s with
// grpc.keepalive_timeout_ms 35000).
func TestSettingsTimeout(t *testing.T) {
	for options, want := range map[string]time.Duration{
		``:                                       time.Minute,
		`["grpc.keepalive_timeout_ms", 35000]`:   70 * time.Second,
		`["grpc.keepalive_timeout_ms", 1000]`:    time.Minute,
		`["grpc.http2.settings_timeout", 2000]`:  2 * time.Second,
		`["grpc.http2.settings_timeout", 0]`:     time.Nanosecond, // at once, as grpc-core
		`["grpc.http2.settings_timeout", -5]`:    time.Nanosecond,
		`["grpc.http2.settings_timeout", 90000]`: 90 * time.Second,
	} {
		cfg, err := ParseConfig([]byte(`{"address": "x:1", "methods": [], "options": [` + options + `]}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Limits.settingsTimeout(); got != want {
			t.Errorf("options [%s]: settings timeout %v, want %v", options, got, want)
		}
	}
}
