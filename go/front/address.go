package front

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
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
//	host:port, [v6]:port      TCP ("localhost": the IPv4 loopback; Bind adds
//	                          the IPv6 one, see isLocalhost)
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
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return bindAddress{}, err
	}
	if host == "" && port == "" {
		return bindAddress{}, errors.New("host and port must not be empty")
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	return bindAddress{network: "tcp", address: net.JoinHostPort(host, port)}, nil
}

// unixFile is a socket file address. An empty path binds an unnamed socket
// that Linux names itself (autobind).
// isLocalhost reports a TCP address on "localhost", which grpcio binds on
// both loopback interfaces.
func isLocalhost(address string) bool {
	host, _, err := net.SplitHostPort(address)
	return err == nil && host == "localhost"
}

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
