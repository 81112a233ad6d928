package front

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"strings"
)

// TLS: the server credentials (pygrpc_native.ssl_server_credentials). What
// a TLS connection proves about its client is in security.go.
//
// Client certificates are asked for only with require_client_auth, as
// grpcio does: grpcio's ssl_server_credentials(require_client_auth=False)
// doesn't request one even when root certificates are given.

// tlsJSON is the "tls" member of the configuration (see ParseTLS). PEM
// travels base64-encoded ([]byte), so that the bytes arrive as given.
type tlsJSON struct {
	Key               []byte  `json:"key"`
	Chain             []byte  `json:"chain"`
	Roots             *[]byte `json:"roots"` // nil: no root certificates
	RequireClientAuth bool    `json:"require_client_auth"`
}

// ParseTLS reads TLS credentials:
//
//	{"key": base64 PEM, "chain": base64 PEM, "roots": base64 PEM or null,
//	 "require_client_auth": false}
//
// and checks them: the key parses and matches the first certificate of the
// chain, every certificate parses, root certificates hold at least one
// certificate. A JSON null gives a nil config (plaintext). Problems are
// ConfigErrors that name the ssl_server_credentials() argument at fault.
func ParseTLS(doc []byte) (*tls.Config, error) {
	var raw *tlsJSON
	if err := json.Unmarshal(doc, &raw); err != nil {
		return nil, configErrorf("invalid TLS credentials: %v", err)
	}
	if raw == nil {
		return nil, nil
	}
	return newServerTLS(raw)
}

func newServerTLS(raw *tlsJSON) (*tls.Config, error) {
	if err := checkChain(raw.Chain); err != nil {
		return nil, err
	}
	if err := checkKey(raw.Key); err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(raw.Chain, raw.Key)
	if err != nil {
		return nil, configErrorf("the private key does not match the first certificate of its certificate chain (%v)", err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{pair},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"},
	}
	if raw.Roots != nil {
		pool, err := rootPool(*raw.Roots)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
	}
	if raw.RequireClientAuth {
		if cfg.ClientCAs == nil {
			return nil, configErrorf("require_client_auth needs root_certificates to verify client certificates with")
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
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

// parseCertificates parses every CERTIFICATE block; what names the data
// in errors.
func parseCertificates(data []byte, what string) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for _, b := range pemBlocks(data) {
		if b.Type != "CERTIFICATE" {
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
