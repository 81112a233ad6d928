package front

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/metadata"
)

// validateResponseMetadata checks keys Python wants to send. Keys must be
// valid lowercase HTTP/2 header names, and the grpc- prefix belongs to gRPC
// itself (README: known differences).
func validateResponseMetadata(md metadata.MD) error {
	for k := range md {
		if k == "" {
			return fmt.Errorf("metadata key must not be empty")
		}
		if strings.HasPrefix(k, "grpc-") {
			return fmt.Errorf("metadata key %q is reserved by gRPC", k)
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
