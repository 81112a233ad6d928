package front

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// bindAddress is an address of add_insecure_port() / add_secure_port() in
// grpcio's syntax, as the network and address net.Listen takes.
type bindAddress struct {
	network string // "tcp" or "unix"
	address string // host:port, a socket path, or "@name" (abstract)
	// path is the socket file of a "unix" address ("" for abstract ones).
	path string
}

// parseBindAddress reads grpcio's address forms:
//
//	host:port, [v6]:port      TCP (a host name: see hostAddresses); a port left
//	                          out or empty is 443, grpc-core's default
//	unix:path, unix:/abs      a Unix socket file, relative or absolute
//	unix:///abs               the same, as a URI
//	unix-abstract:name        a Linux abstract socket (no file)
func parseBindAddress(address string) (bindAddress, error) {
	switch {
	case strings.HasPrefix(address, "unix-abstract:"):
		name := strings.TrimPrefix(address, "unix-abstract:")
		return bindAddress{network: "unix", address: "@" + name}, nil
	case strings.HasPrefix(address, "unix://"):
		path := strings.TrimPrefix(address, "unix://")
		if !strings.HasPrefix(path, "/") {
			return bindAddress{}, errors.New("a unix:// address needs an absolute path (unix:///path/to/socket); use unix:relative/path for a relative one")
		}
		return unixFile(path)
	case strings.HasPrefix(address, "unix:"):
		return unixFile(strings.TrimPrefix(address, "unix:"))
	}
	host, port, err := splitHostPort(address)
	if err != nil {
		return bindAddress{}, err
	}
	return bindAddress{network: "tcp", address: net.JoinHostPort(host, port)}, nil
}

// defaultPort is the port of a TCP address that names none: grpc-core
// binds the "https" service's.
const defaultPort = "443"

// splitHostPort splits a TCP address as grpc-core does: "[host]" or
// "[host]:port"; "host:port" with one colon; otherwise the whole address
// is the host (a name, or an IPv6 address with no brackets and no port).
// A port left out or empty is defaultPort, and a number is read as
// grpc-core reads it, with white space around it and a "+" (so
// "127.0.0.1:0 " is port 0); any other port is a service name for Go's
// resolver. An address with neither host nor port is refused.
func splitHostPort(address string) (host, port string, err error) {
	if strings.HasPrefix(address, "[") {
		end := strings.IndexByte(address, ']')
		if end < 0 {
			return "", "", fmt.Errorf("address %s: missing ']'", address)
		}
		rest := address[end+1:]
		host = address[1:end]
		if rest != "" && rest[0] != ':' {
			return "", "", fmt.Errorf("address %s: unexpected %q after ']'", address, rest)
		}
		port = strings.TrimPrefix(rest, ":")
	} else if strings.Count(address, ":") == 1 {
		host, port, _ = strings.Cut(address, ":")
	} else {
		host = address
	}
	if host == "" && port == "" {
		return "", "", errors.New("host and port must not be empty")
	}
	if port == "" {
		return host, defaultPort, nil
	}
	return host, numericPort(port), nil
}

// numericPort is port's decimal digits when it is a number as grpc-core
// reads one (ASCII white space around it, an optional "+"), else port.
func numericPort(port string) string {
	digits := strings.TrimPrefix(strings.Trim(port, " \t\n\v\f\r"), "+")
	if digits == "" {
		return port
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return port
		}
	}
	return digits
}

// hostAddresses is what a TCP address's host name stands for, and its
// port: "localhost" (in any case) its two loopbacks, the IPv4 one first, as
// grpcio binds them; another name, the addresses the resolver gives (within
// nameLookupTimeout). nil for an address that names no host (an IP
// literal, a wildcard, a Unix socket) and for a name that doesn't resolve:
// those are bound as given, so that the error says why.
func hostAddresses(address string) ([]string, string) {
	if strings.HasPrefix(address, "unix:") || strings.HasPrefix(address, "unix-abstract:") {
		return nil, ""
	}
	host, port, err := splitHostPort(address)
	if err != nil || host == "" || net.ParseIP(host) != nil {
		return nil, ""
	}
	if strings.EqualFold(host, "localhost") {
		return []string{"127.0.0.1", "::1"}, port
	}
	ctx, cancel := context.WithTimeout(context.Background(), nameLookupTimeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(ips) == 0 {
		return nil, ""
	}
	hosts := make([]string, len(ips))
	for i, ip := range ips {
		hosts[i] = ip.String()
	}
	return hosts, port
}

// nameLookupTimeout bounds the resolution of a host name to bind.
const nameLookupTimeout = 10 * time.Second

// unixFile is a socket file address. An empty path binds an unnamed socket
// that Linux names itself (autobind).
func unixFile(path string) (bindAddress, error) {
	return bindAddress{network: "unix", address: path, path: path}, nil
}

// removeStaleSocket deletes a Unix socket file left at path (by a server
// that didn't remove its own), as grpcio does before binding. Only sockets
// are removed: any other file makes the bind fail, as with grpcio.
func removeStaleSocket(path string) error {
	info, err := os.Lstat(path)
	if err != nil || info.Mode()&os.ModeSocket == 0 {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the stale socket file: %w", err)
	}
	return nil
}
