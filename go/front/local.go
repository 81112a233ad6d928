package front

import (
	"fmt"
	"net"

	"google.golang.org/grpc/credentials"
)

// grpcio's local credentials (local_server_credentials): no encryption;
// the connection itself is the proof. LOCAL_TCP serves only peers on a
// loopback address, UDS only connections on a Unix socket; any other
// connection is closed before HTTP/2, as grpc-core's local security
// connector refuses it.

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

// checkLocal is the local handshake: an error when the connection is not
// of the kind the credentials accept.
func checkLocal(kind localKind, remote net.Addr) error {
	switch kind {
	case localUDS:
		if remote.Network() != "unix" {
			return fmt.Errorf("local credentials (UDS) serve Unix sockets only; refused a connection from %s", remote)
		}
		return nil
	case localTCP:
		if ta, ok := remote.(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
			return fmt.Errorf("local credentials (LOCAL_TCP) serve loopback addresses only; refused a connection from %s", remote)
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
