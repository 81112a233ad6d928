package front

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"time"
)

// Method is one method the front serves natively. Its index in
// Config.Methods is the method id that events carry.
type Method struct {
	Path            string // "/package.Service/Method"
	ServerStreaming bool
	// ClientStreaming methods get their request messages under credit
	// (requests.go); their EventCall carries no payload.
	ClientStreaming bool
	// Fallback methods are proxied to the fallback server, never to Python.
	Fallback bool
}

// Config is everything a Front is created with. It arrives from Python as
// JSON (see ParseConfig) because creation is rare and JSON keeps the C shim
// free of per-field conversion code.
type Config struct {
	Address string
	Methods []Method
	// BearerTokens maps an accepted token to the client key that events of
	// its calls carry. Empty means no authentication.
	BearerTokens map[string]string
	// Ordered keeps the arrival order of calls from one connection.
	Ordered bool
	// ResolveUnknown turns calls to unknown paths into EventLookup events
	// instead of answering UNIMPLEMENTED (or proxying them, with Fallback).
	ResolveUnknown bool
	// Fallback is the gRPC target (e.g. "unix:///path/sock") of a server
	// that gets the calls the native path doesn't serve.
	Fallback string
	// MaxConcurrentRPCs refuses calls over this many active native calls
	// with RESOURCE_EXHAUSTED; 0 means no limit, and a negative value
	// refuses every call (grpc.server() with a limit of 0 or less).
	MaxConcurrentRPCs int
	// HoldSlots keeps a call Python saw in its MaxConcurrentRPCs place
	// until Python reports its handler done (Calls.HandlerDone), as grpcio
	// counts calls, instead of only until the call ends on the wire.
	HoldSlots bool
	// HoldRefusals: a request message the transport refuses (over the
	// size limit, undecodable) on a stream Python takes as events ends
	// the call only when Python asks for a message past it; it reaches
	// Python as the stream's end (EventHalfClose) meanwhile, after the
	// messages before it. grpcio's servers end such a call only when
	// their handler reads the refused message, and a handler that
	// answers before that answers as usual.
	HoldRefusals bool
	// RaiseSendLimit: an op whose message is over Limits.MaxSendMsgSize
	// says so to its sender (ResultTooLarge) besides ending the call, so
	// that a server learns it at that send, as grpc.aio's write raises
	// there and grpcio's server stops pulling the response iterator; by
	// default such an op is ResultOK and only the client learns of it.
	RaiseSendLimit bool
	Limits         Limits
	// TLS secures the port with these credentials (ParseTLS); nil:
	// plaintext.
	TLS *PortSecurity
	// Transport is the HTTP/2 transport behind the seam: TransportH2 (the
	// front's own, the default) or TransportGRPCGo (grpc-go's server, the
	// oracle the other is tested against).
	Transport string
}

// The transports a front can serve with (Config.Transport).
const (
	TransportGRPCGo = "grpcgo"
	TransportH2     = "h2"
)

// transportOption names the transport in a server's options; without it,
// the PGN_TRANSPORT environment variable does (for running whole test
// suites on either), and without that, the front's own (h2).
const (
	transportOption = "grpc.pygrpc_native.transport"
	transportEnv    = "PGN_TRANSPORT"
)

// checkTransport validates a transport name from where (the option or the
// environment variable).
func checkTransport(name, where string) error {
	if name == TransportGRPCGo || name == TransportH2 {
		return nil
	}
	return configErrorf("%s must be %q or %q, got %q", where, TransportGRPCGo, TransportH2, name)
}

// Limits are the protocol settings that grpcio channel options control.
// Defaults are grpcio's, except MaxConcurrentStreams (see the README's
// limitations).
type Limits struct {
	MaxRecvMsgSize         int // bytes; math.MaxInt32 means unlimited
	MaxSendMsgSize         int
	MaxConcurrentStreams   uint32
	MaxHeaderListSize      uint32
	KeepaliveTime          time.Duration
	KeepaliveTimeout       time.Duration
	KeepalivePermitNoCalls bool
	// The client ping policy (grpc.http2.min_ping_interval_without_data_ms,
	// grpc.http2.max_ping_strikes), as grpc-core polices pings: see
	// pingPolicy.
	PingMinInterval  time.Duration
	PingStrikes      int
	ReusePort        bool
	HandshakeTimeout time.Duration
	// SettingsTimeout is how long a client has to acknowledge the
	// server's SETTINGS before the connection ends with GOAWAY
	// SETTINGS_TIMEOUT (grpc.http2.settings_timeout); 0: grpc-core's
	// default, twice KeepaliveTimeout but at least a minute
	// (settingsTimeout). The h2 transport only: grpc-go's has no such
	// clock.
	SettingsTimeout time.Duration
	// Connection lifetime (grpc.max_connection_idle_ms, _age_ms,
	// _age_grace_ms); 0 means no limit, as in grpcio.
	MaxConnectionIdle     time.Duration
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration
	// MaxConnections is grpc.max_allowed_incoming_connections; 0: none.
	MaxConnections int
	// Compression is how responses are compressed unless a call says
	// otherwise (compression=, grpc.default_compression_algorithm and
	// grpc.default_compression_level).
	Compression Compression
	// DisabledCompression refuses requests in these encodings
	// (grpc.compression_enabled_algorithms_bitset); nil: none.
	DisabledCompression DisabledCompression
	// StreamWindow is the receive window each stream gets
	// (SETTINGS_INITIAL_WINDOW_SIZE): what a client may send on a stream
	// ahead of its handler. FixedWindow: grpc.http2.bdp_probe is 0, so, as
	// in grpcio, the window is grpc.http2.lookahead_bytes (64 KiB unless
	// given) and stays so, and a request stream is read only one message
	// ahead of its handler; otherwise grpcio grows its windows as data
	// flows (BDP probing), which the h2 transport stands in for with a
	// fixed 1 MiB (or the lookahead, if larger) and grpc-go's transport
	// with its own BDP probing.
	StreamWindow uint32
	FixedWindow  bool
}

// settingsTimeout is how long a client may leave the server's SETTINGS
// unacknowledged: SettingsTimeout, or grpc-core's default for it.
func (l *Limits) settingsTimeout() time.Duration {
	if l.SettingsTimeout > 0 {
		return l.SettingsTimeout
	}
	return max(2*l.KeepaliveTimeout, time.Minute)
}

// The stream window without BDP probing, and where it starts with it: 1
// MiB keeps a 1 MiB unary call to one window's round trip on a fast link.
const (
	defaultStreamWindow = 1 << 20
	grpcioLookahead     = 65535
)

func defaultLimits() Limits {
	return Limits{
		MaxRecvMsgSize:       4 << 20,
		MaxSendMsgSize:       math.MaxInt32,
		MaxConcurrentStreams: 1024,
		MaxHeaderListSize:    16 << 10,
		KeepaliveTime:        2 * time.Hour,
		KeepaliveTimeout:     20 * time.Second,
		PingMinInterval:      5 * time.Minute,
		PingStrikes:          2,
		HandshakeTimeout:     120 * time.Second,
		// grpc-go's "infinity", which its keepalive settings take as unset.
		MaxConnectionIdle:     infinity,
		MaxConnectionAge:      infinity,
		MaxConnectionAgeGrace: infinity,
		StreamWindow:          defaultStreamWindow,
	}
}

// ConfigError is a problem with what the front was created with. The C shim
// raises it as ValueError.
type ConfigError struct{ msg string }

func (e *ConfigError) Error() string { return e.msg }

func configErrorf(format string, args ...any) error {
	return &ConfigError{msg: fmt.Sprintf(format, args...)}
}

// infinity is grpc-go's "no limit" for connection lifetimes.
const infinity = time.Duration(math.MaxInt64)

type configJSON struct {
	Address           string            `json:"address"`
	Methods           []json.RawMessage `json:"methods"`
	Options           [][2]any          `json:"options"`
	BearerTokens      map[string]string `json:"bearer_tokens"`
	Ordered           bool              `json:"ordered"`
	ResolveUnknown    bool              `json:"resolve_unknown"`
	Fallback          string            `json:"fallback"`
	MaxConcurrentRPCs int               `json:"maximum_concurrent_rpcs"`
	HoldSlots         bool              `json:"hold_slots"`
	HoldRefusals      bool              `json:"hold_refusals"`
	RaiseSendLimit    bool              `json:"raise_send_limit"`
	TLS               json.RawMessage   `json:"tls"`
}

// ParseConfig reads the JSON document the Python layer builds:
//
//	{"address": "[::]:0", "methods": [["/pkg.Svc/M", false], ...],
//	 "options": [["grpc.max_receive_message_length", 1024], ...],
//	 "bearer_tokens": {"token": "client key"}, "ordered": false,
//	 "maximum_concurrent_rpcs": 0, "hold_slots": false,
//	 "hold_refusals": false, "raise_send_limit": false, "tls": null}
//
// A method is [path, server_streaming] or [path, server_streaming,
// client_streaming].
//
// "tls" holds TLS credentials as ParseTLS reads them.
//
// Option values that are not integers are ignored, as grpcio ignores them;
// of an option given twice, the first value counts, as in grpcio.
func ParseConfig(doc []byte) (*Config, error) {
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	dec.UseNumber()
	var raw configJSON
	if err := dec.Decode(&raw); err != nil {
		return nil, configErrorf("invalid front configuration: %v", err)
	}
	if raw.Address == "" {
		return nil, configErrorf("address must not be empty")
	}
	cfg := &Config{
		Address:           raw.Address,
		BearerTokens:      raw.BearerTokens,
		Ordered:           raw.Ordered,
		ResolveUnknown:    raw.ResolveUnknown,
		Fallback:          raw.Fallback,
		MaxConcurrentRPCs: raw.MaxConcurrentRPCs,
		HoldSlots:         raw.HoldSlots,
		HoldRefusals:      raw.HoldRefusals,
		RaiseSendLimit:    raw.RaiseSendLimit,
		Limits:            defaultLimits(),
	}
	if len(raw.TLS) > 0 {
		t, err := ParseTLS(raw.TLS)
		if err != nil {
			return nil, err
		}
		cfg.TLS = t
	}
	seen := make(map[string]bool, len(raw.Methods))
	for i, m := range raw.Methods {
		var entry []any
		if err := json.Unmarshal(m, &entry); err != nil || (len(entry) != 2 && len(entry) != 3) {
			return nil, configErrorf("methods[%d] must be a (path, server_streaming[, client_streaming]) tuple", i)
		}
		path, ok1 := entry[0].(string)
		streaming, ok2 := entry[1].(bool)
		clientStreaming, ok3 := false, true
		if len(entry) == 3 {
			clientStreaming, ok3 = entry[2].(bool)
		}
		if !ok1 || !ok2 || !ok3 {
			return nil, configErrorf("methods[%d] must be a (str, bool[, bool]) tuple", i)
		}
		if !validMethodPath(path) {
			return nil, configErrorf("methods[%d]: %q is not a method path (a non-empty :path without control characters but tab)", i, path)
		}
		if seen[path] {
			return nil, configErrorf("methods[%d]: %q is listed twice", i, path)
		}
		seen[path] = true
		cfg.Methods = append(cfg.Methods, Method{Path: path, ServerStreaming: streaming, ClientStreaming: clientStreaming})
	}
	opts := optionsSeen{softMeta: -1, hardMeta: -1, bdpProbe: 1}
	given := make(map[string]bool, len(raw.Options))
	for _, kv := range raw.Options {
		name, ok := kv[0].(string)
		if !ok {
			return nil, configErrorf("option names must be strings, got %v", kv[0])
		}
		// As in grpcio, an option given twice keeps its first value.
		if given[name] {
			continue
		}
		given[name] = true
		if name == transportOption {
			t, _ := kv[1].(string)
			if err := checkTransport(t, transportOption); err != nil {
				return nil, err
			}
			cfg.Transport = t
			continue
		}
		n, isInt := intValue(kv[1])
		if !isInt {
			if text, isText := kv[1].(string); isText && name == "grpc.default_compression_algorithm" {
				cfg.Limits.Compression.setAlgorithmName(text)
			}
			continue
		}
		if err := cfg.Limits.apply(name, n, &opts); err != nil {
			return nil, err
		}
	}
	cfg.Limits.MaxHeaderListSize = headerListLimit(opts.softMeta, opts.hardMeta)
	cfg.Limits.setWindow(opts.bdpProbe, opts.lookahead)
	cfg.Limits.Compression.dropDisabled(cfg.Limits.DisabledCompression)
	if cfg.Transport == "" {
		cfg.Transport = TransportH2
		if t := os.Getenv(transportEnv); t != "" {
			if err := checkTransport(t, transportEnv); err != nil {
				return nil, err
			}
			cfg.Transport = t
		}
	}
	return cfg, nil
}

func intValue(v any) (int64, bool) {
	num, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	n, err := num.Int64()
	return n, err == nil
}

// optionsSeen holds the options that count only together, once all are
// read: the metadata limits (-1: not given), grpc.http2.bdp_probe (1
// unless given) and grpc.http2.lookahead_bytes (0: not given).
type optionsSeen struct {
	softMeta, hardMeta  int64
	bdpProbe, lookahead int64
}

// apply sets one honoured grpcio option; unknown names are ignored, as
// grpcio ignores options it does not read. Values grpcio refuses are
// ConfigErrors.
func (l *Limits) apply(name string, n int64, seen *optionsSeen) error {
	switch name {
	case "grpc.max_connection_idle_ms":
		l.MaxConnectionIdle = lifetime(n)
	case "grpc.max_connection_age_ms":
		l.MaxConnectionAge = lifetime(n)
	case "grpc.max_connection_age_grace_ms":
		l.MaxConnectionAgeGrace = lifetime(n)
		if n <= 0 {
			// No grace at all, as grpc-core reads 0 and less; grpc-go
			// would read 0 as "unset".
			l.MaxConnectionAgeGrace = time.Nanosecond
		}
	case "grpc.server_handshake_timeout_ms":
		// 0 and less close every connection at once, as grpc-core does.
		l.HandshakeTimeout = time.Nanosecond
		if n > 0 {
			l.HandshakeTimeout = milliseconds(n)
		}
	case "grpc.max_allowed_incoming_connections":
		if n > 0 && n <= math.MaxInt32 {
			l.MaxConnections = int(n)
		}
	case "grpc.default_compression_algorithm":
		return l.Compression.setAlgorithm(n)
	case "grpc.default_compression_level":
		return l.Compression.setLevel(n)
	case "grpc.compression_enabled_algorithms_bitset":
		l.DisabledCompression = disabledByBitset(n)
	case "grpc.max_receive_message_length":
		l.MaxRecvMsgSize = sizeLimit(n)
	case "grpc.max_send_message_length":
		l.MaxSendMsgSize = sizeLimit(n)
	case "grpc.max_concurrent_streams":
		if n > 0 && n <= math.MaxUint32 {
			l.MaxConcurrentStreams = uint32(n)
		}
	case "grpc.max_metadata_size":
		seen.softMeta = n
	case "grpc.absolute_max_metadata_size":
		seen.hardMeta = n
	case "grpc.http2.bdp_probe":
		seen.bdpProbe = n
	case "grpc.http2.lookahead_bytes":
		seen.lookahead = n
	case "grpc.keepalive_time_ms":
		if n > 0 {
			l.KeepaliveTime = milliseconds(n)
		}
	case "grpc.keepalive_timeout_ms":
		if n > 0 {
			l.KeepaliveTimeout = milliseconds(n)
		}
	case "grpc.http2.settings_timeout":
		// 0 and less: at once, as grpc-core reads them.
		l.SettingsTimeout = time.Nanosecond
		if n > 0 {
			l.SettingsTimeout = milliseconds(n)
		}
	case "grpc.keepalive_permit_without_calls":
		l.KeepalivePermitNoCalls = n != 0
	case "grpc.http2.min_ping_interval_without_data_ms":
		l.PingMinInterval = milliseconds(max(n, 0))
	case "grpc.http2.max_ping_strikes":
		l.PingStrikes = int(min(max(n, 0), math.MaxInt32))
	case "grpc.so_reuseport":
		l.ReusePort = n == 1
	}
	return nil
}

// setWindow sets StreamWindow and FixedWindow from grpc.http2.bdp_probe
// and grpc.http2.lookahead_bytes (see Limits).
func (l *Limits) setWindow(bdpProbe, lookahead int64) {
	if lookahead <= 0 {
		lookahead = 0
	} else if lookahead > math.MaxInt32 {
		lookahead = math.MaxInt32 // the largest window HTTP/2 has
	}
	l.FixedWindow = bdpProbe == 0
	switch {
	case l.FixedWindow && lookahead > 0:
		l.StreamWindow = uint32(lookahead)
	case l.FixedWindow:
		l.StreamWindow = grpcioLookahead
	default:
		l.StreamWindow = uint32(max(lookahead, defaultStreamWindow))
	}
}

// lifetime maps a grpcio connection lifetime in milliseconds to grpc-go's:
// INT_MAX is no limit, as in grpcio, and so is zero or less here, where
// grpcio 1.85 takes it as a lifetime of nothing (README: known
// differences).
func lifetime(ms int64) time.Duration {
	if ms <= 0 || ms >= math.MaxInt32 {
		return infinity
	}
	return time.Duration(ms) * time.Millisecond
}

// milliseconds is n ms as a Duration, capped at the longest one (n ms
// would overflow past about 292 years and turn negative).
func milliseconds(n int64) time.Duration {
	return time.Duration(min(n, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond
}

// sizeLimit maps grpcio's message size option to a byte count: a negative
// value means unlimited.
func sizeLimit(n int64) int {
	if n < 0 || n > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(n)
}

// headerListLimit is the size over which a call's request metadata is
// refused. grpc-core derives its hard limit the same way: the absolute
// limit when given, else 16 KiB or 1.25 times the soft limit, whichever is
// larger.
func headerListLimit(soft, hard int64) uint32 {
	limit := int64(16 << 10)
	switch {
	case hard > 0:
		limit = hard
	case soft > 0 && soft*5/4 > limit:
		limit = soft * 5 / 4
	}
	if limit > math.MaxUint32 {
		limit = math.MaxUint32
	}
	return uint32(limit)
}

// validMethodPath reports a path the front can serve: any non-empty
// :path value without control characters but tab (which HTTP/2 lets a
// client send, and grpcio serves). Paths are usually
// "/package.Service/Method", but grpcio serves any path a client sends
// ("Echo" included), and so does the front's own transport; grpc-go's
// answers paths without a leading "/" UNIMPLEMENTED itself.
func validMethodPath(path string) bool {
	if path == "" {
		return false
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
