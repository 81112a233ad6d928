package front

import (
	"context"
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
// once per call.
type listener struct {
	net.Listener
	m *metrics
}

func listen(address string, reusePort bool, m *metrics) (*listener, error) {
	lc := net.ListenConfig{}
	if reusePort {
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
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, &BindError{Address: address, Err: err}
	}
	// grpcio treats "localhost" as the loopback interface; binding the
	// IPv4 loopback keeps the single-port promise.
	if host == "localhost" {
		host = "127.0.0.1"
	}
	l, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, &BindError{Address: address, Err: err}
	}
	return &listener{Listener: l, m: m}, nil
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
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.m.connections.Add(1)
	l.m.connectionsTotal.Add(1)
	return &conn{Conn: c, m: l.m, remote: newConnAddr(c.RemoteAddr())}, nil
}

// conn counts bytes and remembers the connection's identity.
type conn struct {
	net.Conn
	m      *metrics
	remote *connAddr
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
// brackets), "unix:/path".
func formatPeer(a net.Addr) string {
	switch t := a.(type) {
	case *net.TCPAddr:
		if ip4 := t.IP.To4(); ip4 != nil {
			return fmt.Sprintf("ipv4:%s:%d", ip4, t.Port)
		}
		return fmt.Sprintf("ipv6:%%5B%s%%5D:%d", t.IP, t.Port)
	case *net.UnixAddr:
		return "unix:" + t.Name
	default:
		return a.Network() + ":" + a.String()
	}
}
