package front

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// checkMetadataSize refuses request metadata over limit, counted as HTTP/2
// does (name + value + 32 per field), with grpcio's RESOURCE_EXHAUSTED
// wording: one value longer than grpcio's string limit (the larger of
// limit and 16 KiB) is named as such; otherwise the fields are counted in
// the order they came until one crosses the limit, and that total is given
// with the size of each field counted, as grpc-core's parser stops there
// (which also bounds the details, however many fields a client sends).
// grpcio also counts pseudo-headers that the front doesn't show, so its
// totals are larger (README: known differences).
func checkMetadataSize(md Metadata, limit uint32) error {
	hardValue := max(int(limit), 16<<10)
	total := 0
	for i, kv := range md {
		if len(kv[1]) > hardValue {
			return status.Errorf(codes.ResourceExhausted, "received metadata size exceeds hard limit (value length %d vs. %d)", len(kv[1]), limit)
		}
		total += len(kv[0]) + len(kv[1]) + 32
		if uint32(total) > limit {
			var fields strings.Builder
			for _, f := range md[:i+1] {
				fmt.Fprintf(&fields, " %s:%dB", f[0], len(f[0])+len(f[1])+32)
			}
			return status.Errorf(codes.ResourceExhausted, "received metadata size exceeds hard limit (%d vs. %d); %s", total, limit, fields.String())
		}
	}
	return nil
}

// receivedTooLarge is the status of a request message over the receive
// limit, in grpcio's words (grpc-go's are "grpc: received message larger
// than max (N vs. M)").
func receivedTooLarge(size, limit int) error {
	return status.Errorf(codes.ResourceExhausted, "SERVER: Received message larger than max (%d vs. %d)", size, limit)
}

// statusDetailsKey carries rich error details (a google.rpc.Status), as
// grpcio-status sends them through trailing metadata. Like grpcio, the front
// sends it exactly as given (with the status left to the status line).
const statusDetailsKey = "grpc-status-details-bin"

// leftOutOfResponse reports the response metadata keys that a transport
// writes itself (content-type, the status, the negotiation of encodings)
// or that only a request carries (te, grpc-timeout), which a handler's
// metadata must not override: they are left out, and grpcio's clients
// never see them from grpcio's server either. Every other key goes as
// given, grpc- ones included (grpc-retry-pushback-ms,
// grpc-status-details-bin, ...), and user-agent and grpc-message-type,
// which grpcio's server sends too (grpc-go's transport drops those two
// itself, as reserved).
func leftOutOfResponse(k string) bool {
	if k == "" || k[0] == ':' {
		return true
	}
	switch k {
	case "content-type", "te", "grpc-status", "grpc-message",
		"grpc-encoding", "grpc-accept-encoding", "grpc-internal-encoding-request", "grpc-timeout":
		return true
	}
	return false
}

// asGRPCCoreSends is the value grpcio's server would send for response
// metadata key k given v: as given, except for the keys grpc-core parses
// (a grpcio client does too, on receipt), which grpc-core's server parses
// and writes back, a value that doesn't parse becoming the key's default:
// grpc-previous-rpc-attempts (an unsigned 32-bit count, default 0),
// grpc-retry-pushback-ms (a signed 64-bit count of ms, default its
// minimum, "no pushback") and lb-cost-bin (a cost of 8 bytes then a name;
// a shorter value is a zero cost). Sent as given, a value that doesn't
// parse ends the call with INTERNAL "Error parsing ... metadata" at a
// grpcio client, and every later call on that connection that meets the
// same key too (grpc-core keeps the failed entry in its HPACK table).
func asGRPCCoreSends(k, v string) string {
	switch k {
	case "grpc-previous-rpc-attempts":
		n, err := strconv.ParseUint(strings.TrimPrefix(trimASCIISpace(v), "+"), 10, 32)
		if err != nil {
			return "0"
		}
		return strconv.FormatUint(n, 10)
	case "grpc-retry-pushback-ms":
		n, err := strconv.ParseInt(trimASCIISpace(v), 10, 64)
		if err != nil {
			return "-9223372036854775808"
		}
		return strconv.FormatInt(n, 10)
	case "lb-cost-bin":
		if len(v) < 8 {
			return "\x00\x00\x00\x00\x00\x00\x00\x00"
		}
	}
	return v
}

// trimASCIISpace is s without the ASCII white space around it (what
// grpc-core's integer parsing skips).
func trimASCIISpace(s string) string {
	return strings.Trim(s, " \t\n\v\f\r")
}

// validateMetadata checks metadata Python wants to send. Keys must be valid
// lowercase HTTP/2 header names and values of keys without -bin printable
// ASCII, as grpcio requires (grpc-go would drop such initial metadata
// silently).
// binaryKey reports a metadata key whose values are bytes, base64 on the
// wire, when the server sends it: one ending in "-bin" after at least one
// character of its own, as grpc-core tells them ("-bin" alone is a text
// key there, whose values must be printable).
func binaryKey(k string) bool { return len(k) > 4 && strings.HasSuffix(k, "-bin") }

// BinaryOnArrival reports a request metadata key whose values arrive in
// base64 and reach the handler as bytes: any key ending in "-bin", "-bin"
// itself too (grpcio's client sends that key's bytes in base64, and
// grpcio's server decodes them and hands bytes to the handler).
func BinaryOnArrival(k string) bool { return strings.HasSuffix(k, "-bin") }

func validateMetadata(md Metadata) error {
	for _, kv := range md {
		k, v := kv[0], kv[1]
		if !binaryKey(k) {
			for i := 0; i < len(v); i++ {
				if v[i] < 0x20 || v[i] > 0x7e {
					return fmt.Errorf("metadata value of %q must be printable ASCII; use a -bin key for other data", k)
				}
			}
		}
		if k == "" {
			return fmt.Errorf("metadata key must not be empty")
		}
		for i := 0; i < len(k); i++ {
			ch := k[i]
			if !('a' <= ch && ch <= 'z' || '0' <= ch && ch <= '9' || ch == '-' || ch == '_' || ch == '.') {
				return fmt.Errorf("metadata key %q is not a valid header name (lowercase letters, digits, '-', '_', '.')", k)
			}
		}
	}
	return nil
}
