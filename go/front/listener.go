package front

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// listener counts connections and bytes, and gives every accepted
// connection a connAddr that grpc-go then reports as the call's peer. That
// lets a handler reach its connection's state from peer.FromContext without
// a map lookup, and formats the peer string once per connection instead of
// once per call. Each listener has its own TLS configuration (nil:
// plaintext), which listenerCreds applies to its connections.
type listener struct {
	net.Listener
	m   *metrics
	tls *tls.Config
	// maxConns closes connections accepted while that many are open on
	// the whole front (grpc.max_allowed_incoming_connections); 0: no limit.
	maxConns int64
}

// listen binds one address in grpcio's syntax (see parseBindAddress).
func listen(address string, limits *Limits, tlsConfig *tls.Config, m *metrics) (*listener, error) {
	ba, err := parseBindAddress(address)
	if err != nil {
		return nil, &BindError{Address: address, Err: err}
	}
	lc := net.ListenConfig{}
	if limits.ReusePort && ba.network == "tcp" {
		lc.Control = func(network, address string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			})
			if err != nil {
				return err
			}
			return serr
		}
	}
	if ba.path != "" {
		if err := removeStaleSocket(ba.path); err != nil {
			return nil, &BindError{Address: address, Err: err}
		}
	}
	l, err := lc.Listen(context.Background(), ba.network, ba.address)
	if err != nil {
		return nil, &BindError{Address: address, Err: err}
	}
	return &listener{Listener: l, m: m, tls: tlsConfig, maxConns: int64(limits.MaxConnections)}, nil
}

// port is what add_*_port() returns for this listener: the TCP port, or 1
// for a Unix socket, as grpcio returns.
func (l *listener) port() int {
	if ta, ok := l.Addr().(*net.TCPAddr); ok {
		return ta.Port
	}
	return 1
}

// BindError says which address could not be bound and why. The C shim
// raises it as OSError.
type BindError struct {
	Address string
	Err     error
}

func (e *BindError) Error() string {
	return fmt.Sprintf("cannot listen on %q: %v", e.Address, e.Err)
}

func (e *BindError) Unwrap() error { return e.Err }

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.m.connectionsTotal.Add(1)
		if n := l.m.connections.Add(1); l.maxConns > 0 && n > l.maxConns {
			// Over grpc.max_allowed_incoming_connections: closed at once,
			// as grpcio does; the client sees UNAVAILABLE.
			l.m.connections.Add(-1)
			c.Close()
			continue
		}
		return &conn{Conn: c, m: l.m, remote: newConnAddr(c.RemoteAddr()), tls: l.tls}, nil
	}
}

// conn counts bytes and remembers the connection's identity.
type conn struct {
	net.Conn
	m      *metrics
	remote *connAddr
	tls    *tls.Config // its listener's; nil: plaintext
	closed atomic.Bool
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.m.bytesIn.Add(uint64(n))
	return n, err
}

func (c *conn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.m.bytesOut.Add(uint64(n))
	return n, err
}

func (c *conn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.m.connections.Add(-1)
	}
	return c.Conn.Close()
}

func (c *conn) RemoteAddr() net.Addr { return c.remote }

// connAddr is the remote address of one connection plus the state calls on
// that connection share.
type connAddr struct {
	net.Addr
	// peer is the address as grpcio's context.peer() formats it.
	peer  string
	order orderState
	authCache
}

func newConnAddr(a net.Addr) *connAddr {
	return &connAddr{Addr: a, peer: formatPeer(a)}
}

// formatPeer writes an address the way grpcio's context.peer() does:
// "ipv4:127.0.0.1:5000", "ipv6:%5B::1%5D:5000" (grpcio percent-encodes the
// brackets), "unix:" (a Unix socket client).
func formatPeer(a net.Addr) string {
	switch t := a.(type) {
	case *net.TCPAddr:
		if ip4 := t.IP.To4(); ip4 != nil {
			return fmt.Sprintf("ipv4:%s:%d", ip4, t.Port)
		}
		return fmt.Sprintf("ipv6:%%5B%s%%5D:%d", t.IP, t.Port)
	case *net.UnixAddr:
		// grpcio names a client's (unnamed) Unix socket "unix:"; Go
		// reports an unnamed peer as "@".
		if t == nil || t.Name == "@" {
			return "unix:"
		}
		return "unix:" + t.Name
	default:
		return a.Network() + ":" + a.String()
	}
}
