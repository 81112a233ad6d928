package front

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// listener counts connections and bytes, and gives every accepted
// connection its connState, which grpc-go then reports as the call's peer
// address. Each listener has its own security (nil: plaintext), which
// listenerCreds applies to its connections.
type listener struct {
	net.Listener
	m    *metrics
	sec  *PortSecurity
	open *openConns // the set's
	// maxConns closes connections accepted while that many are open from
	// this listener (grpc.max_allowed_incoming_connections, which grpcio
	// counts per listening address: "localhost", two of them, lets twice
	// as many in); 0: no limit.
	maxConns int64
	conns    atomic.Int64 // connections accepted here and not closed
}

// listen binds one address in grpcio's syntax (see parseBindAddress), for
// connections under limits, counted in m.
func listen(address string, limits *Limits, sec *PortSecurity, m *metrics, open *openConns) (*listener, error) {
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
	return &listener{Listener: l, m: m, sec: sec, open: open, maxConns: int64(limits.MaxConnections)}, nil
}

// port is what add_*_port() returns for this listener: the TCP port, or 1
// for a Unix socket, as grpcio returns.
func (l *listener) port() int {
	if ta, ok := l.Addr().(*net.TCPAddr); ok {
		return ta.Port
	}
	return 1
}

// listenerSet is a front's bound addresses, each with its own TLS
// configuration (listenerCreds); all serve the same methods, under the
// same limits, counted in the same metrics. Front guards it with its lock,
// except the first port, which Port reads while a Stop holds that lock.
type listenerSet struct {
	limits *Limits
	m      *metrics
	all    []*listener
	first  atomic.Int32
	open   openConns
}

// bind listens on address and returns the bound port. A host name is
// bound on every address it stands for (hostAddresses), on one port, as
// grpc-core binds them, and the bind succeeds when any of them does
// (grpc-core logs the others); an IP address, a wildcard or a Unix socket
// is bound as given.
func (s *listenerSet) bind(address string, sec *PortSecurity) (int, error) {
	hosts, port := hostAddresses(address)
	if hosts == nil {
		lis, err := listen(address, s.limits, sec, s.m, &s.open)
		if err != nil {
			return 0, err
		}
		s.add(lis)
		return lis.port(), nil
	}
	var firstErr error
	bound := 0
	for _, host := range hosts {
		if bound != 0 {
			port = strconv.Itoa(bound) // port 0: the others take the first's
		}
		lis, err := listen(net.JoinHostPort(host, port), s.limits, sec, s.m, &s.open)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		s.add(lis)
		bound = lis.port()
	}
	if bound == 0 {
		var be *BindError
		if errors.As(firstErr, &be) {
			return 0, &BindError{Address: address, Err: be.Err} // named as given
		}
		return 0, firstErr
	}
	return bound, nil
}

// add keeps a bound listener; the first one's port is firstPort.
func (s *listenerSet) add(lis *listener) {
	if len(s.all) == 0 {
		s.first.Store(int32(lis.port()))
	}
	s.all = append(s.all, lis)
}

func (s *listenerSet) empty() bool { return len(s.all) == 0 }

// firstPort is the port of the first address bound, 0 before any.
func (s *listenerSet) firstPort() int { return int(s.first.Load()) }

// anySecure reports whether a listener serves TLS or local credentials:
// only then do connections go through listenerCreds.
func (s *listenerSet) anySecure() bool {
	for _, lis := range s.all {
		if lis.sec != nil {
			return true
		}
	}
	return false
}

// close stops accepting connections on every address.
func (s *listenerSet) close() {
	for _, lis := range s.all {
		lis.Close()
	}
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
		if n := l.conns.Add(1); l.maxConns > 0 && n > l.maxConns {
			// Over grpc.max_allowed_incoming_connections: closed at once,
			// as grpcio does; the client sees UNAVAILABLE.
			l.conns.Add(-1)
			c.Close()
			continue
		}
		l.m.connections.Add(1)
		lc := &conn{Conn: c, m: l.m, remote: newConnState(c.RemoteAddr()), sec: l.sec, open: l.open, listenerConns: &l.conns}
		l.open.add(lc)
		return lc, nil
	}
}

// openConns is the connections a front's listeners accepted and nobody
// has closed yet, so that a stop can close those its transport doesn't
// know of: grpc-go's server waits, as it stops, for every connection
// still in its handshake, up to the handshake timeout (120 s).
type openConns struct {
	mu sync.Mutex
	m  map[*conn]struct{}
}

func (o *openConns) add(c *conn) {
	o.mu.Lock()
	if o.m == nil {
		o.m = make(map[*conn]struct{})
	}
	o.m[c] = struct{}{}
	o.mu.Unlock()
}

func (o *openConns) remove(c *conn) {
	o.mu.Lock()
	delete(o.m, c)
	o.mu.Unlock()
}

// closeAll closes every connection still open.
func (o *openConns) closeAll() {
	o.mu.Lock()
	all := make([]*conn, 0, len(o.m))
	for c := range o.m {
		all = append(all, c)
	}
	o.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
}

// conn counts bytes and remembers the connection's identity. muted: what
// is written from now on is dropped, and Close reads what the client sent
// first (a client refused during its TLS handshake gets no alert:
// refuseClient).
type conn struct {
	net.Conn
	m      *metrics
	remote *connState
	sec    *PortSecurity // its listener's; nil: plaintext
	open   *openConns    // its listener's set's
	// listenerConns counts the connections open from its listener (nil
	// for a conn no listener accepted).
	listenerConns *atomic.Int64
	closed        atomic.Bool
	muted         atomic.Bool
}

func (c *conn) muteWrites() { c.muted.Store(true) }

// Bounds on what Close reads of a refused client's data (discardUnread).
const (
	discardWait  = 5 * time.Millisecond // for more to arrive
	discardFor   = 50 * time.Millisecond
	discardBytes = 256 << 10
)

// discardUnread reads what the client has sent and the server hasn't
// read, until none arrives for discardWait (bounded by discardFor and
// discardBytes), so that the close that follows ends the connection with
// a FIN, which a client reads as the socket closed, as grpcio's server
// closes it: closed with data unread, the kernel would send a reset
// instead ("Connection reset by peer"). A refused TLS client has sent
// its first HTTP/2 frames right after its last handshake message.
func (c *conn) discardUnread() {
	buf := make([]byte, 16<<10)
	end := time.Now().Add(discardFor)
	for read := 0; read < discardBytes; {
		wait := time.Now().Add(discardWait)
		if wait.After(end) {
			wait = end
		}
		if c.Conn.SetReadDeadline(wait) != nil {
			return
		}
		n, err := c.Conn.Read(buf)
		read += n
		if err != nil {
			return
		}
	}
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.m.bytesIn.Add(uint64(n))
	return n, err
}

func (c *conn) Write(b []byte) (int, error) {
	if c.muted.Load() {
		return len(b), nil
	}
	n, err := c.Conn.Write(b)
	c.m.bytesOut.Add(uint64(n))
	return n, err
}

func (c *conn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.open.remove(c)
		c.m.connections.Add(-1)
		if c.listenerConns != nil {
			c.listenerConns.Add(-1)
		}
		if c.muted.Load() {
			c.discardUnread()
		}
	}
	return c.Conn.Close()
}

func (c *conn) RemoteAddr() net.Addr { return c.remote }

// connState is the state the calls of one connection share. It is the
// connection's remote address as grpc-go sees it (conn.RemoteAddr), so a
// transport hands it to the front (ServerStream.Conn) without a map lookup, and the
// peer string is formatted once per connection instead of once per call.
type connState struct {
	net.Addr
	// peer is the address as grpcio's context.peer() formats it.
	peer string
	// order is the arrival order of the connection's calls (ordered
	// fronts).
	order orderState
	// security is computed on first request (connSecurity).
	securityOnce sync.Once
	security     *ConnSecurity
}

func newConnState(a net.Addr) *connState {
	return &connState{Addr: a, peer: formatPeer(a)}
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
