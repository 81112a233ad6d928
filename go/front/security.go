package front

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"net/netip"
	"strings"
)

// ConnSecurity is what a connection proves about its client. It is
// neutral on purpose: the C API turns it into grpcio's auth_context()
// (property names, their order, the peer identity key), which is grpcio's
// vocabulary, not the protocol's.
type ConnSecurity struct {
	// TLS: the connection is TLS; otherwise plaintext, and Cert is nil.
	TLS bool
	// Cert is the client's verified certificate; nil when it sent none
	// (certificates are only asked for with require_client_auth).
	Cert *ClientCert
	// Session is the TLS session's parameters; nil unless TLS.
	Session *TLSSession
	// Local: grpcio's local credentials accepted the connection (no TLS).
	Local bool
}

// TLSSession is what was negotiated on a TLS connection.
type TLSSession struct {
	Resumed bool        // an earlier session was resumed
	Version uint16      // tls.VersionTLS12 or tls.VersionTLS13
	Group   tls.CurveID // the key exchange group; 0 when none was used
	// ServerName is the name the client asked for (SNI); "" when it sent none.
	ServerName string
}

// ClientCert is a client certificate as grpc-core describes it.
type ClientCert struct {
	// Subject is the distinguished name as BoringSSL prints it (RFC 2253,
	// see formatSubject).
	Subject string
	// CommonName is the subject's first common name; "" without one.
	CommonName string
	// PEM is the certificate, PEM-encoded.
	PEM []byte
	// ChainPEM is the rest of what the client sent after its certificate
	// (intermediates, a root if it sent one), PEM-encoded one after the
	// other; nil when it sent its certificate alone.
	ChainPEM []byte
	// AltNames are the subject alternative names in certificate order.
	AltNames []AltName
}

// AltNameKind is the kind of a subject alternative name.
type AltNameKind uint8

const (
	AltNameOther AltNameKind = iota // a kind grpc-core doesn't name; Value is ""
	AltNameDNS
	AltNameEmail
	AltNameURI
	AltNameIP // Value as inet_ntop writes it
)

// AltName is one subject alternative name.
type AltName struct {
	Kind  AltNameKind
	Value string
}

// plaintextSecurity is every plaintext connection's.
var plaintextSecurity = &ConnSecurity{}

// connSecurity is the security of a TLS connection a call came on,
// computed once per connection (cs nil: on every call).
func connSecurity(state *tls.ConnectionState, cs *connState) *ConnSecurity {
	if cs == nil {
		return tlsSecurity(state)
	}
	cs.securityOnce.Do(func() { cs.security = tlsSecurity(state) })
	return cs.security
}

// tlsSecurity describes a TLS connection and its client certificate, if
// any.
func tlsSecurity(state *tls.ConnectionState) *ConnSecurity {
	session := &TLSSession{
		Resumed:    state.DidResume,
		Version:    state.Version,
		Group:      state.CurveID,
		ServerName: state.ServerName,
	}
	if len(state.PeerCertificates) == 0 {
		return &ConnSecurity{TLS: true, Session: session}
	}
	leaf := state.PeerCertificates[0]
	var chain []byte
	for _, c := range state.PeerCertificates[1:] {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return &ConnSecurity{TLS: true, Session: session, Cert: &ClientCert{
		Subject:    formatSubject(leaf.RawSubject),
		CommonName: cString(firstCommonName(leaf.RawSubject)),
		PEM:        pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}),
		ChainPEM:   chain,
		AltNames:   subjectAltNames(leaf),
	}}
}

var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// subjectAltNames lists the SANs in certificate order, as grpc-core does
// (Go's x509 sorts them by kind).
func subjectAltNames(c *x509.Certificate) []AltName {
	var out []AltName
	for _, ext := range c.Extensions {
		if !ext.Id.Equal(oidSubjectAltName) {
			continue
		}
		var seq asn1.RawValue
		if _, err := asn1.Unmarshal(ext.Value, &seq); err != nil {
			return nil
		}
		rest := seq.Bytes
		for len(rest) > 0 {
			var v asn1.RawValue
			var err error
			if rest, err = asn1.Unmarshal(rest, &v); err != nil {
				return out
			}
			switch {
			case v.Class == asn1.ClassContextSpecific && v.Tag == 1:
				out = append(out, AltName{AltNameEmail, cString(latin1(v.Bytes))})
			case v.Class == asn1.ClassContextSpecific && v.Tag == 2:
				out = append(out, AltName{AltNameDNS, cString(latin1(v.Bytes))})
			case v.Class == asn1.ClassContextSpecific && v.Tag == 6:
				out = append(out, AltName{AltNameURI, cString(latin1(v.Bytes))})
			case v.Class == asn1.ClassContextSpecific && v.Tag == 7:
				out = append(out, ipAltName(v.Bytes))
			default:
				out = append(out, AltName{Kind: AltNameOther})
			}
		}
	}
	return out
}

// cString is a certificate's name as grpc-core keeps it for the peer's
// identity: a C string, which ends at a NUL byte ("a\x00b" reads "a").
// x509_subject, escaped, keeps the whole name.
func cString(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

// ipAltName is an IP address SAN, written as inet_ntop does: netip's
// RFC 5952 form, except that IPv4-compatible addresses (::a.b.c.d) keep the
// dotted tail. An address of another length is of no kind grpc-core names.
func ipAltName(b []byte) AltName {
	if s, ok := formatIP(b); ok {
		return AltName{AltNameIP, s}
	}
	return AltName{Kind: AltNameOther}
}

func formatIP(b []byte) (string, bool) {
	switch len(b) {
	case 4:
		return netip.AddrFrom4([4]byte(b)).String(), true
	case 16:
		a := netip.AddrFrom16([16]byte(b))
		zero := true
		for _, x := range b[:12] {
			zero = zero && x == 0
		}
		if zero && (b[12] != 0 || b[13] != 0) {
			return "::" + netip.AddrFrom4([4]byte(b[12:])).String(), true
		}
		return a.String(), true
	}
	return "", false
}
