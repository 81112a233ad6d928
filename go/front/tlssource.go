package front

import (
	"crypto/tls"
	"log"
	"sync"
	"sync/atomic"
)

// PortSecurity is how one port secures its connections (ParseTLS): TLS,
// whose configuration may change between handshakes, or grpcio's local
// credentials. A nil *PortSecurity is plaintext.
type PortSecurity struct {
	// tls is the configuration the port's handshakes start from; its
	// GetConfigForClient answers with source's current one. nil: local.
	tls    *tls.Config
	source *tlsSource
	// local is LOCAL_TCP or UDS for local credentials.
	local localKind
}

// Update replaces the key material of a TLS port (grpcio's
// ServerCertificateConfiguration as the "tls" JSON's pairs and roots) for
// the handshakes that start from now on; connections already made keep
// theirs. The client-authentication requirement stays the port's.
func (p *PortSecurity) Update(doc []byte) error {
	if p == nil || p.source == nil {
		return configErrorf("these credentials are not TLS credentials; only TLS key material can be replaced")
	}
	return p.source.replace(doc)
}

// tlsSource is the current configuration of a TLS port. Handshakes read
// it through GetConfigForClient; refresh, when set, may replace it first
// (a fetcher in Python, files on disk). Calls on existing connections
// never come here: a configuration is chosen once, at the handshake.
type tlsSource struct {
	current           atomic.Pointer[tls.Config]
	requireClientAuth bool
	// refresh returns new key material, or nil to keep the current one
	// (its problems are logged by it). Handshakes call it one at a time.
	refresh   func() *tlsMaterial
	refreshMu sync.Mutex
	tickets   sessionTickets
}

func newTLSSource(cfg *tls.Config, requireClientAuth bool) *tlsSource {
	s := &tlsSource{requireClientAuth: requireClientAuth}
	s.install(cfg)
	return s
}

// install makes cfg, new key material, current, with session ticket keys
// of its own: sessions of the configuration it replaces are not resumed,
// so every client verifies the new certificate in a full handshake, as
// with grpcio (whose new configuration brings new ticket keys).
func (s *tlsSource) install(cfg *tls.Config) {
	s.tickets.renew(cfg)
	s.current.Store(cfg)
}

// listenerConfig is the configuration a listener hands to grpc-go: every
// handshake asks the source for the current one, whose session ticket
// keys are used (sessionTickets).
func (s *tlsSource) listenerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: tls12CipherSuites,
		NextProtos:   []string{"h2"},
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			cfg := s.forHandshake()
			if s.requireClientAuth {
				cfg = refuseClient(cfg, hello.Conn)
			}
			return cfg, nil
		},
	}
}

// forHandshake is the configuration of a new handshake, refreshed first
// when the source can be. Handshakes refresh one at a time, each once (as
// grpcio runs its fetcher once per handshake), so a fetcher never runs
// concurrently with itself.
func (s *tlsSource) forHandshake() *tls.Config {
	if s.refresh != nil {
		s.refreshMu.Lock()
		if m := s.refresh(); m != nil {
			if cfg, err := newServerTLS(*m, s.requireClientAuth); err != nil {
				log.Printf("pygrpc_native: new TLS credentials refused, the current ones stay in use: %v", err)
			} else {
				s.install(cfg)
			}
		}
		s.refreshMu.Unlock()
	}
	cfg := s.current.Load()
	s.tickets.rotate(cfg)
	return cfg
}

// replace parses key material ({"pairs": ..., "roots": ...}) and makes it
// current; an error leaves the current configuration.
func (s *tlsSource) replace(doc []byte) error {
	m, err := parseMaterial(doc)
	if err != nil {
		return err
	}
	cfg, err := newServerTLS(*m, s.requireClientAuth)
	if err != nil {
		return err
	}
	s.install(cfg)
	return nil
}
