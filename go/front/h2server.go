package front

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The front's own HTTP/2 transport ("h2"), a second implementation of the
// seam (transport.go) on golang.org/x/net/http2's Framer and hpack, made for
// the front's hand-off rather than for Go handlers:
//
//   - one reader goroutine per connection parses frames, decodes headers and
//     gRPC messages, and hands a call to the front when its request is
//     complete (at once for request streams);
//   - whoever sends (the call's owner) encodes its frames into the
//     connection's write buffer, and whoever finds the buffer unflushed
//     writes it out: a lone reply is written at once, replies under load are
//     coalesced into one write, and no goroutine sits between a reply and the
//     socket (h2write.go);
//   - flow control, keepalive, connection age and idleness, GOAWAY in two
//     phases and the size limits are enforced here, as grpc-go's server does
//     with the same Limits.
//
// Files: h2server.go (listeners, connections, stop), h2conn.go (the reader
// and connection-level frames), h2write.go (the write side), h2stream.go
// (one call as a ServerStream), h2header.go (request headers).

// h2Server serves the front's listeners with its own transport.
type h2Server struct {
	limits *Limits
	h      *handler
	stats  CallStats // nil: not measured
	// acceptEncoding is the grpc-accept-encoding of every response's
	// headers (as grpcio's server sends it).
	acceptEncoding string

	mu        sync.Mutex
	listeners map[net.Listener]bool
	conns     map[*h2Conn]bool
	// stopping: GracefulStop or Stop began (listeners closed, connections
	// told to go away or closed).
	stopping bool
	// connsDone is closed when conns is empty after stopping began.
	connsDone chan struct{}
	// cancelAll: the stop gives calls no grace (cancelsAllOnStop).
	cancelAll atomic.Bool

	// handlers counts the calls whose owner still runs (serveCall): Stop
	// returns only after every one has queued its last event, so that the
	// front can close the event queues behind them.
	handlers sync.WaitGroup
	workers  *h2Workers
}

func newH2Server(l *Limits, h *handler, cs CallStats) *h2Server {
	return &h2Server{
		limits:         l,
		h:              h,
		stats:          cs,
		acceptEncoding: l.DisabledCompression.acceptEncoding(),
		listeners:      make(map[net.Listener]bool),
		conns:          make(map[*h2Conn]bool),
		connsDone:      make(chan struct{}),
		workers:        newH2Workers(),
	}
}

// errH2Stopped is Serve's error once the server has stopped.
var errH2Stopped = errors.New("h2 transport: server stopped")

// Serve accepts connections on l until the server stops.
func (s *h2Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		l.Close()
		return errH2Stopped
	}
	s.listeners[l] = true
	s.mu.Unlock()
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			done := s.stopping
			s.mu.Unlock()
			if done {
				return errH2Stopped
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of descriptors and the like: back off, as
				// net/http does, rather than spin.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c := newH2Conn(s, nc)
		if !s.track(c) {
			nc.Close()
			continue
		}
		go c.serve()
	}
}

// track registers a new connection; false once the server is stopping.
func (s *h2Server) track(c *h2Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	s.conns[c] = true
	return true
}

// forget unregisters a closed connection.
func (s *h2Server) forget(c *h2Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if len(s.conns) == 0 && (s.stopping) {
		closeOnce(s.connsDone)
	}
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// closeListenersLocked closes every listener; s.mu held.
func (s *h2Server) closeListenersLocked() {
	for l := range s.listeners {
		l.Close()
	}
	clear(s.listeners)
}

// GracefulStop stops accepting, tells every connection to go away (two
// GOAWAY frames with a PING between, so that calls the client sent before
// it saw the first are still served), and returns when every connection
// has closed after its calls ended.
func (s *h2Server) GracefulStop() {
	why := goAwayShutdown
	if s.cancelAll.Load() {
		why = goAwayCancelAll
	}
	s.stop(func(c *h2Conn) { c.goAway(why) })
}

// cancelsAllOnStop: the stop to come gives calls no grace (stop(None)),
// which its GOAWAY frames say as grpcio's do. Before GracefulStop.
func (s *h2Server) cancelsAllOnStop() { s.cancelAll.Store(true) }

// Stop closes every listener and connection at once (the calls on them end
// as their connection is lost), and returns once every call's owner has
// returned.
func (s *h2Server) Stop() { s.stop(func(c *h2Conn) { c.close(errH2Stopped) }) }

// stop stops accepting, ends every connection with end, and waits until
// every connection has closed and every call's owner has returned.
func (s *h2Server) stop(end func(*h2Conn)) {
	s.mu.Lock()
	s.stopping = true
	s.closeListenersLocked()
	conns := make([]*h2Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	if len(s.conns) == 0 {
		closeOnce(s.connsDone)
	}
	s.mu.Unlock()
	for _, c := range conns {
		end(c)
	}
	<-s.connsDone
	s.handlers.Wait()
	s.workers.stop()
}
