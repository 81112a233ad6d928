package front

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
)

// TLS: reading server credentials (pygrpc_native.ssl_server_credentials,
// and grpcio's credential factories as pygrpc_native remembers them). How
// a port's configuration changes while it serves is in tlssource.go; what
// a TLS connection proves about its client is in security.go.
//
// Client certificates are asked for only with require_client_auth, as
// grpcio does: grpcio's ssl_server_credentials(require_client_auth=False)
// doesn't request one even when root certificates are given.

// tlsJSON is the "tls" member of the configuration (see ParseTLS). PEM
// travels base64-encoded ([]byte), so that the bytes arrive as given.
type tlsJSON struct {
	Pairs             [][2][]byte `json:"pairs"`
	Roots             *[]byte     `json:"roots"` // nil: no root certificates
	RequireClientAuth bool        `json:"require_client_auth"`
	// Fetch: the configuration may be replaced before each handshake by
	// the fetcher Python registered under this number (see tlsfetch.go).
	Fetch int64 `json:"fetch"`
	// Files: the key, chain and roots are read from these paths, and read
	// again when they change (see tlsfiles.go); Pairs and Roots are unused.
	Files *tlsFiles `json:"files"`
	// Local: grpcio's local credentials, "tcp" (LOCAL_TCP) or "uds"; no
	// TLS, and nothing else is read.
	Local string `json:"local"`
}

// tlsMaterial is the part of the credentials that rotation replaces: the
// key/certificate pairs and the roots (grpcio's ServerCertificateConfiguration).
type tlsMaterial struct {
	Pairs [][2][]byte `json:"pairs"`
	Roots *[]byte     `json:"roots"`
}

// ParseTLS reads a port's security:
//
//	{"pairs": [[base64 key PEM, base64 chain PEM], ...],
//	 "roots": base64 PEM or null, "require_client_auth": false,
//	 "fetch": 0, "files": null, "local": ""}
//
// and checks it: every key parses and matches the first certificate of
// its chain, every certificate parses, root certificates hold at least one
// certificate. Several pairs are chosen between by the name the client
// asks for (SNI), as grpcio does: crypto/tls serves the first pair whose
// certificate is valid for that name, else the first pair. A JSON null
// gives nil (plaintext). Problems are ConfigErrors that name the
// argument at fault.
func ParseTLS(doc []byte) (*PortSecurity, error) {
	var raw *tlsJSON
	if err := json.Unmarshal(doc, &raw); err != nil {
		return nil, configErrorf("invalid TLS credentials: %v", err)
	}
	if raw == nil {
		return nil, nil
	}
	if raw.Local != "" {
		return newLocalSecurity(raw.Local)
	}
	var material tlsMaterial
	var files *filesSource
	if raw.Files != nil {
		var err error
		if files, material, err = newFilesSource(*raw.Files); err != nil {
			return nil, err
		}
	} else {
		material = tlsMaterial{Pairs: raw.Pairs, Roots: raw.Roots}
	}
	cfg, err := newServerTLS(material, raw.RequireClientAuth)
	if err != nil {
		return nil, err
	}
	src := newTLSSource(cfg, raw.RequireClientAuth)
	switch {
	case files != nil:
		src.refresh = files.refresh
	case raw.Fetch != 0:
		src.refresh = fetchRefresh(raw.Fetch)
	}
	return &PortSecurity{tls: src.listenerConfig(), source: src}, nil
}

// tls12CipherSuites are the TLS 1.2 suites a server offers: grpc-core's
// default list (ECDHE with AES-GCM), so that a client or a scanner meets
// the same suites as on grpcio's server, where Go's defaults would add
// CBC with SHA-1 and ChaCha20. (TLS 1.3's suites aren't configurable, and
// all of them are AEAD.)
var tls12CipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
}

// newServerTLS is the configuration of one set of key material.
func newServerTLS(m tlsMaterial, requireClientAuth bool) (*tls.Config, error) {
	if len(m.Pairs) == 0 {
		return nil, configErrorf("at least one (private_key, certificate_chain) pair is required")
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: tls12CipherSuites,
		NextProtos:   []string{"h2"},
	}
	for i, p := range m.Pairs {
		pair, err := keyPair(p[0], p[1])
		if err != nil {
			if len(m.Pairs) > 1 {
				return nil, configErrorf("pair %d: %v", i+1, err)
			}
			return nil, err
		}
		cfg.Certificates = append(cfg.Certificates, pair)
	}
	if len(cfg.Certificates) > 1 {
		cfg.GetCertificate = chooseByName(cfg.Certificates)
	}
	if m.Roots != nil {
		pool, err := rootPool(*m.Roots)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
	}
	if requireClientAuth {
		if cfg.ClientCAs == nil {
			return nil, configErrorf("require_client_auth needs root_certificates to verify client certificates with")
		}
		// Go's crypto/tls doesn't verify the client's chain here: the
		// port does (verifyClient), so that it can refuse a client without
		// the TLS alert Go would send (refuseClient, which replaces this
		// VerifyConnection for each handshake with one that also mutes).
		cfg.ClientAuth = tls.RequestClientCert
		pool := cfg.ClientCAs
		cfg.VerifyConnection = func(cs tls.ConnectionState) error { return verifyClient(cs, pool) }
	}
	return cfg, nil
}

// chooseByName picks the pair a client gets by the name it asked for
// (SNI), as grpc-core picks among its pairs: the first whose certificate
// names it (certNames.match); the first pair when the client asked for no
// name or none matches. Unlike Go's own choice, the client's key types
// aren't looked at, and names follow grpc-core's rules, not Go's.
func chooseByName(pairs []tls.Certificate) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	names := make([]certNames, len(pairs))
	for i := range pairs {
		names[i] = namesOf(pairs[i].Leaf)
	}
	return func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if hello.ServerName != "" {
			for i := range names {
				if names[i].match(hello.ServerName) {
					return &pairs[i], nil
				}
			}
		}
		return &pairs[0], nil
	}
}

// certNames are the names a server certificate answers to, as grpc-core
// reads them: every subject alternative name it can print (DNS, URI,
// email, IP), and the common name, which counts only when the certificate
// has no subject alternative name of any kind.
type certNames struct {
	sans       []string
	commonName string // "" when there are SANs
}

func namesOf(leaf *x509.Certificate) certNames {
	var n certNames
	if leaf == nil {
		return n
	}
	alt := subjectAltNames(leaf)
	for _, a := range alt {
		if a.Kind != AltNameOther {
			n.sans = append(n.sans, a.Value)
		}
	}
	if len(alt) == 0 { // names of other kinds (a directory name) count too
		n.commonName = firstCommonName(leaf.RawSubject)
	}
	return n
}

// match is grpc-core's check of a certificate against a server name: an
// IP address matches a SAN that is the same text; any other name matches
// a SAN, or the common name of a certificate without SANs, by
// entryMatches.
func (n certNames) match(name string) bool {
	isIP := net.ParseIP(name) != nil
	for _, san := range n.sans {
		if (isIP && san == name) || (!isIP && entryMatches(san, name)) {
			return true
		}
	}
	return !isIP && n.commonName != "" && entryMatches(n.commonName, name)
}

// entryMatches compares one name of a certificate with a server name as
// grpc-core does: a trailing dot on either is dropped, case is ignored, and
// "*.rest" stands for exactly one leading label, only when the name's
// parent domain has a dot of its own ("*.localhost" matches nothing,
// "*.example.com" matches "a.example.com"). Any other '*' is a literal.
func entryMatches(entry, name string) bool {
	name = strings.TrimSuffix(name, ".")
	entry = strings.TrimSuffix(entry, ".")
	if entry == "" {
		return false
	}
	if strings.EqualFold(entry, name) {
		return true
	}
	rest, ok := strings.CutPrefix(entry, "*.")
	if !ok || rest == "" {
		return false
	}
	_, parent, ok := strings.Cut(name, ".")
	if !ok || len(parent) < 2 {
		return false
	}
	if dot := strings.IndexByte(parent, '.'); dot < 0 || dot == len(parent)-1 {
		return false // a top-level parent ("localhost", "com")
	}
	return strings.EqualFold(strings.TrimSuffix(parent, "."), rest)
}

// verifyClient is the check of a port that requires client
// authentication, run at the end of each handshake (resumed ones too): a
// certificate, whose chain leads to one of roots and is valid now for
// client authentication (what Go's RequireAndVerifyClientCert checks),
// whose key usage, if it has one, allows digital signatures, and whose
// extended key usages, if any, name TLS client authentication, as
// BoringSSL requires for grpcio (Go lets anyExtendedKeyUsage stand for
// every usage, and doesn't look at the key usage). A certificate without
// either extension may be used for anything, on both.
func verifyClient(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the client sent no certificate")
	}
	leaf := cs.PeerCertificates[0]
	opts := x509.VerifyOptions{
		Roots:         roots,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(opts); err != nil {
		return fmt.Errorf("the client certificate is refused: %w", err)
	}
	if leaf.KeyUsage != 0 && leaf.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
		// The client signed the handshake with this key, which its key
		// usage doesn't allow: BoringSSL refuses it for grpcio.
		return errors.New("the client certificate's key usage does not include digital signature")
	}
	if len(leaf.ExtKeyUsage) == 0 && len(leaf.UnknownExtKeyUsage) == 0 {
		return nil
	}
	if slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return nil
	}
	return errors.New("the client certificate's extended key usage does not include TLS client authentication")
}

// writeMuter is a connection that can drop what is written to it from now
// on (the listener's conn, h2's socket).
type writeMuter interface{ muteWrites() }

// refuseClient is cfg for one handshake on conn of a port that requires
// client authentication: a client verifyClient refuses is refused as
// grpcio's server refuses it, with the connection closed and no TLS alert
// (Go sends one, which grpcio's clients log as data corruption, three
// error lines per attempt, and report as "Unwrap failed" where grpcio's
// server gives "Socket closed").
func refuseClient(cfg *tls.Config, conn net.Conn) *tls.Config {
	roots := cfg.ClientCAs
	cfg = cfg.Clone()
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		err := verifyClient(cs, roots)
		if m, ok := conn.(writeMuter); ok && err != nil {
			m.muteWrites()
		}
		return err
	}
	return cfg
}

// keyPair checks and pairs one private key with its certificate chain.
func keyPair(key, chain []byte) (tls.Certificate, error) {
	if err := checkChain(chain); err != nil {
		return tls.Certificate{}, err
	}
	if err := checkKey(key); err != nil {
		return tls.Certificate{}, err
	}
	pair, err := tls.X509KeyPair(certificateLabels(chain), key)
	if err != nil {
		return tls.Certificate{}, configErrorf("the private key does not match the first certificate of its certificate chain (%v)", err)
	}
	return pair, nil
}

// pemBlocks returns the PEM blocks of data; text around them is ignored.
func pemBlocks(data []byte) []*pem.Block {
	var blocks []*pem.Block
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return blocks
		}
		blocks = append(blocks, b)
	}
}

// isCertificate reports a PEM block of a certificate: CERTIFICATE, or the
// older X509 CERTIFICATE that OpenSSL (so grpcio) reads as well.
func isCertificate(b *pem.Block) bool { return b.Type == "CERTIFICATE" || b.Type == "X509 CERTIFICATE" }

// certificateLabels is data with its certificates labelled CERTIFICATE,
// the only label Go's tls.X509KeyPair reads.
func certificateLabels(data []byte) []byte {
	if !bytes.Contains(data, []byte("-----BEGIN X509 CERTIFICATE-----")) {
		return data
	}
	var out []byte
	for _, b := range pemBlocks(data) {
		if isCertificate(b) {
			b = &pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes}
		}
		out = append(out, pem.EncodeToMemory(b)...)
	}
	return out
}

// parseCertificates parses every certificate block (isCertificate); what
// names the data in errors.
func parseCertificates(data []byte, what string) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for _, b := range pemBlocks(data) {
		if !isCertificate(b) {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, configErrorf("%s: certificate %d cannot be read: %v", what, len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, configErrorf("%s holds no PEM certificate (-----BEGIN CERTIFICATE-----)", what)
	}
	return certs, nil
}

func checkChain(chain []byte) error {
	_, err := parseCertificates(chain, "the certificate chain")
	return err
}

func checkKey(key []byte) error {
	for _, b := range pemBlocks(key) {
		if !strings.HasSuffix(b.Type, "PRIVATE KEY") {
			continue
		}
		if b.Type == "ENCRYPTED PRIVATE KEY" || strings.Contains(b.Headers["Proc-Type"], "ENCRYPTED") {
			return configErrorf("the private key is encrypted; pass it decrypted")
		}
		var err error
		switch b.Type {
		case "RSA PRIVATE KEY":
			_, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			_, err = x509.ParseECPrivateKey(b.Bytes)
		default:
			_, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		}
		if err != nil {
			return configErrorf("the private key cannot be read: %v", err)
		}
		return nil
	}
	return configErrorf("the private key holds no PEM private key (-----BEGIN PRIVATE KEY-----)")
}

func rootPool(roots []byte) (*x509.CertPool, error) {
	certs, err := parseCertificates(roots, "root_certificates")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}
