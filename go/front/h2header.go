package front

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
)

// h2Request is what a call's request HEADERS say, as the h2 transport reads
// them: the gRPC fields it acts on, and the metadata in arrival order.
type h2Request struct {
	method     string // :path
	header     Metadata
	encoding   string   // grpc-encoding of the request messages ("" none)
	accept     []string // grpc-accept-encoding
	timeout    time.Duration
	hasTimeout bool
	// headerBuf is header's first backing array (parseRequest), so that a
	// call with few metadata keys keeps them without an allocation of
	// their own; the request lives in its h2Stream, and nothing reuses
	// either.
	headerBuf [8][2]string
}

// h2Reject is a request the transport answers itself: with an HTTP status
// and a gRPC status (trailers-only), or with RST_STREAM when rst is set.
type h2Reject struct {
	httpStatus int
	st         *status.Status
	rst        bool // reset the stream with PROTOCOL_ERROR instead
}

// parseRequest reads a request's header fields, in order. Pseudo-headers
// and gRPC's own keys are acted on; the rest are metadata (values of -bin
// keys decoded), kept in the order they came, with :authority (or host, as
// gRFC A41 says) and user-agent among them, as grpc-go's server keeps them.
// A host header is metadata too, and so is grpc-message-type, as grpcio's
// server shows both to handlers.
// r is the zero h2Request it fills (its stream's); nil is success.
func parseRequest(r *h2Request, fields []hpack.HeaderField) *h2Reject {
	if len(fields) <= len(r.headerBuf) {
		r.header = r.headerBuf[:0]
	} else {
		r.header = make(Metadata, 0, len(fields))
	}
	var (
		httpMethod         string
		authorities, hosts int
		host               string
		headerErr          *status.Status
	)
	for _, f := range fields {
		switch f.Name {
		case ":method":
			httpMethod = f.Value
		case ":path":
			r.method = f.Value
		case ":authority":
			authorities++
			r.add(f.Name, f.Value)
		case "host":
			hosts++
			host = f.Value
			r.add(f.Name, f.Value)
		case "content-type":
			// grpcio's server serves any content type (a proxy that
			// forwards application/grpc-web, a hand-made curl call);
			// grpc-go's answers 415 to what isn't application/grpc.
			r.add(f.Name, f.Value)
		case "grpc-encoding":
			r.encoding = f.Value
			if e := f.Value; e != identity && (e == "" || encoding.GetCompressor(e) == nil) && headerErr == nil {
				// grpc-core knows identity, deflate and gzip; any other
				// name (none included) doesn't parse, and grpcio answers
				// that (the spec would have UNIMPLEMENTED, which grpc-go's
				// transport answers).
				headerErr = status.New(codes.Internal, "Error parsing 'grpc-encoding' metadata")
			}
		case "grpc-accept-encoding":
			r.add(f.Name, f.Value)
			for _, e := range strings.Split(f.Value, ",") {
				if e = strings.TrimSpace(e); e != "" {
					r.accept = append(r.accept, e)
				}
			}
		case "grpc-timeout":
			d, err := parseTimeout(f.Value)
			if err != nil && headerErr == nil {
				headerErr = status.New(codes.Internal, "Error parsing 'grpc-timeout' metadata") // grpcio's words
			}
			r.timeout, r.hasTimeout = d, true
		case "connection":
			// A request with a connection header is malformed (gRFC A41).
			return &h2Reject{rst: true}
		case "user-agent":
			r.add(f.Name, f.Value)
		default:
			if strings.HasPrefix(f.Name, ":") || reservedGRPCKey(f.Name) {
				continue
			}
			v := f.Value
			if BinaryOnArrival(f.Name) {
				b, err := decodeBinaryValue(v)
				if err != nil {
					if headerErr == nil {
						headerErr = status.Newf(codes.Internal, "Error parsing '%s' metadata: illegal base64 encoding", f.Name) // grpcio's words
					}
					continue
				}
				v = b
			}
			r.add(f.Name, v)
		}
	}
	if authorities > 1 || hosts > 1 {
		return &h2Reject{httpStatus: http.StatusBadRequest, st: status.New(codes.Internal,
			fmt.Sprintf("num values of :authority: %d, num values of host: %d, both must only have 1 value as per HTTP/2 spec", authorities, hosts))}
	}
	if headerErr != nil {
		// As grpcio answers it, naming the first field that didn't parse.
		return &h2Reject{httpStatus: http.StatusOK, st: headerErr}
	}
	if authorities == 0 {
		if hosts == 0 {
			return &h2Reject{httpStatus: http.StatusBadRequest, st: status.New(codes.Internal, "no host or :authority header present")}
		}
		r.add(":authority", host) // a host stands in for :authority (A41)
	}
	if httpMethod != http.MethodPost {
		return &h2Reject{httpStatus: http.StatusMethodNotAllowed, st: status.Newf(codes.Internal, "Received a HEADERS frame with :method %q which should be POST", httpMethod)}
	}
	return nil
}

func (r *h2Request) add(k, v string) {
	r.header = append(r.header, [2]string{k, v})
}

// reservedGRPCKey: keys gRPC uses for itself, never request metadata.
func reservedGRPCKey(k string) bool {
	switch k {
	case "grpc-message", "grpc-status", "te":
		return true
	}
	return false
}

// decodeBinaryValue decodes a -bin value as grpc-core does: raw after a
// NUL byte (settingTrueBinary), else base64 with
// any '=' at its end ignored (so padded or not, even padded wrongly), and
// the bits past its last byte zero. Anything else, a comma included (no
// value list here: grpc-core refuses one), is an error.
func decodeBinaryValue(v string) (string, error) {
	if v != "" && v[0] == 0 {
		return v[1:], nil // raw (settingTrueBinary)
	}
	b, err := base64.RawStdEncoding.Strict().DecodeString(strings.TrimRight(v, "="))
	return string(b), err
}

// parseTimeout reads a grpc-timeout value as grpc-core reads it: spaces,
// digits, spaces, a unit, spaces. The spec allows 8 digits; grpc-core
// takes more, and a number over a billion means no deadline (the largest
// duration here). Microseconds and nanoseconds are rounded up to whole
// milliseconds, grpc-core's unit (1n is 1 ms: a call served, where 1 ns
// ended it before its handler ran). A sign or any other character is an
// error.
func parseTimeout(v string) (time.Duration, error) {
	i := skipSpaces(v, 0)
	digits := i
	var n int64 // once over a billion, no longer read: no deadline
	for ; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
		if n <= 1_000_000_000 {
			n = n*10 + int64(v[i]-'0')
		}
	}
	if i == digits {
		return 0, fmt.Errorf("timeout %q has no digits", v)
	}
	i = skipSpaces(v, i)
	if i == len(v) {
		return 0, fmt.Errorf("timeout %q has no unit", v)
	}
	var unit time.Duration
	switch v[i] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, fmt.Errorf("timeout unit in %q is not one of H, M, S, m, u, n", v)
	}
	if skipSpaces(v, i+1) != len(v) {
		return 0, fmt.Errorf("timeout %q has more after its unit", v)
	}
	if n > 1_000_000_000 {
		return time.Duration(1<<63 - 1), nil
	}
	d := time.Duration(n) * unit
	if d/unit != time.Duration(n) {
		return time.Duration(1<<63 - 1), nil
	}
	if unit < time.Millisecond {
		d = (d + time.Millisecond - 1).Truncate(time.Millisecond)
	}
	return d, nil
}

// skipSpaces is the index of the first byte at or after i that isn't a
// space.
func skipSpaces(v string, i int) int {
	for i < len(v) && v[i] == ' ' {
		i++
	}
	return i
}

// encodeGRPCMessage percent-encodes a status message for grpc-message:
// bytes outside printable ASCII, and '%'.
func encodeGRPCMessage(msg string) string {
	clean := true
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < 0x20 || c > 0x7e || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return msg
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(msg) * 2)
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < 0x20 || c > 0x7e || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}
