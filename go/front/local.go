package front

import (
	"fmt"
	"net"

	"google.golang.org/grpc/credentials"
)

// grpcio's local credentials (local_server_credentials): no encryption;
// the connection itself is the proof. LOCAL_TCP serves only connections
// that arrived at 127.0.0.1 or ::1 (grpc-core compares the connection's
// local address with INADDR_LOOPBACK and in6addr_loopback, so one made to
// 127.0.0.2 is refused although its peer is 127.0.0.1), UDS only
// connections on a Unix socket; any other connection is closed before
// HTTP/2, as grpc-core's local security connector refuses it.

type localKind uint8

const (
	localNone localKind = iota
	localTCP
	localUDS
)

func newLocalSecurity(kind string) (*PortSecurity, error) {
	switch kind {
	case "tcp":
		return &PortSecurity{local: localTCP}, nil
	case "uds":
		return &PortSecurity{local: localUDS}, nil
	}
	return nil, configErrorf(`local credentials are "tcp" (LOCAL_TCP) or "uds" (UDS), not %q`, kind)
}

// checkLocal is the local handshake: an error when the connection, which
// arrived at the server's address local, is not of the kind the
// credentials accept.
func checkLocal(kind localKind, local net.Addr) error {
	switch kind {
	case localUDS:
		if local.Network() != "unix" {
			return fmt.Errorf("local credentials (UDS) serve Unix sockets only; refused a connection to %s", local)
		}
		return nil
	case localTCP:
		if ta, ok := local.(*net.TCPAddr); !ok || !(ta.IP.Equal(net.IPv4(127, 0, 0, 1)) || ta.IP.Equal(net.IPv6loopback)) {
			return fmt.Errorf("local credentials (LOCAL_TCP) serve connections to 127.0.0.1 and ::1 only; refused a connection to %s", local)
		}
		return nil
	}
	return fmt.Errorf("not local credentials")
}

// localAuthInfo is the AuthInfo of a connection local credentials
// accepted.
type localAuthInfo struct{ credentials.CommonAuthInfo }

func (localAuthInfo) AuthType() string { return "local" }

// localSecurity is every local connection's.
var localSecurity = &ConnSecurity{Local: true}
