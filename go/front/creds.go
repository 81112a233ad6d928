package front

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
)

// listenerCreds gives each connection the transport security of the
// listener that accepted it, so that one grpc.Server serves plaintext and
// TLS ports (grpcio's add_insecure_port and add_secure_port on one server)
// with one handler, one event queue and one graceful stop.
//
// The alternative, one grpc.Server per listener sharing the handler, would
// need every server stopped, drained and counted separately; with one
// server, grpc-go's GracefulStop, MaxConcurrentStreams and keepalive
// settings cover every port at once.
//
// A TLS connection is handshaken by grpc-go's own TLS credentials (ALPN
// h2, clients without ALPN refused, TLSInfo as the peer's AuthInfo); a
// plaintext one gets no handshake and no AuthInfo, exactly as a server
// without credentials gives.
type listenerCreds struct {
	mu  sync.Mutex
	tls map[*tls.Config]credentials.TransportCredentials
}

func newListenerCreds() *listenerCreds {
	return &listenerCreds{tls: make(map[*tls.Config]credentials.TransportCredentials)}
}

// forConfig returns the TLS credentials of one listener's configuration,
// made once.
func (lc *listenerCreds) forConfig(cfg *tls.Config) credentials.TransportCredentials {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	c, ok := lc.tls[cfg]
	if !ok {
		c = credentials.NewTLS(cfg)
		lc.tls[cfg] = c
	}
	return c
}

func (lc *listenerCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, ok := raw.(*conn)
	if !ok || c.sec == nil {
		return raw, nil, nil
	}
	if c.sec.local != localNone {
		if err := checkLocal(c.sec.local, c.Conn.LocalAddr()); err != nil {
			return nil, nil, err
		}
		return raw, localAuthInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return lc.forConfig(c.sec.tls).ServerHandshake(raw)
}

func (lc *listenerCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("pygrpc_native: listener credentials are for the server side only")
}

// Info reports no security protocol: it differs per connection, and the
// server side of grpc-go reads it for nothing a call can observe.
func (lc *listenerCreds) Info() credentials.ProtocolInfo { return credentials.ProtocolInfo{} }

func (lc *listenerCreds) Clone() credentials.TransportCredentials {
	c := newListenerCreds()
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for k, v := range lc.tls {
		c.tls[k] = v
	}
	return c
}

func (lc *listenerCreds) OverrideServerName(string) error { return nil }
