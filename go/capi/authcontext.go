package main

import (
	"crypto/tls"
	"strconv"
	"strings"

	"github.com/pygrpc-native/pygrpc-native/go/front"
)

// authProperty is one property of grpcio's auth_context() with its values.
type authProperty struct {
	name   string
	values [][]byte
}

// authContext is a connection's security in grpcio's terms: the properties
// of auth_context(), named and ordered as grpc-core sets them, and
// peer_identity_key() ("" for none; peer_identities() are its values).
// This is grpcio's vocabulary, so it lives here, at the boundary to
// grpcio's API, and not in the protocol core.
func authContext(s *front.ConnSecurity) (props []authProperty, identityKey string) {
	if s.Local {
		// grpc-core makes the security type the identity of a local
		// connection.
		return []authProperty{
			{"transport_security_type", [][]byte{[]byte("local")}},
			{"security_level", [][]byte{[]byte("TSI_PRIVACY_AND_INTEGRITY")}},
		}, "transport_security_type"
	}
	if !s.TLS {
		return []authProperty{
			{"transport_security_type", [][]byte{[]byte("insecure")}},
			{"security_level", [][]byte{[]byte("TSI_SECURITY_NONE")}},
		}, ""
	}
	var a authProperties
	a.add("transport_security_type", "ssl")
	spiffeID := ""
	if c := s.Cert; c != nil {
		a.add("x509_subject", c.Subject)
		a.add("x509_common_name", c.CommonName)
		identityKey = "x509_common_name"
		a.addBytes("x509_pem_cert", c.PEM)
		uris := 0
		for _, san := range c.AltNames {
			// The identity is the SANs, or the common name without any.
			identityKey = "x509_subject_alternative_name"
			if san.Kind == front.AltNameOther {
				a.add(identityKey, "other types of SAN")
				continue
			}
			a.add(identityKey, san.Value)
			a.add(altNameProperty[san.Kind], san.Value)
			if san.Kind == front.AltNameURI {
				uris++
				if isSpiffeID(san.Value) {
					spiffeID = san.Value
				}
			}
		}
		// A SPIFFE certificate has exactly one URI SAN.
		if uris != 1 {
			spiffeID = ""
		}
		if c.ChainPEM != nil {
			a.addBytes("x509_pem_cert_chain", c.ChainPEM)
		}
	}
	a.add("security_level", "TSI_PRIVACY_AND_INTEGRITY")
	if ss := s.Session; ss != nil {
		a.addSession(ss)
	}
	if spiffeID != "" {
		a.add("peer_spiffe_id", spiffeID)
	}
	return a, identityKey
}

// addSession adds grpc-core's ssl_ properties, as BoringSSL names the
// version and the group. A client that sent no name (SNI) gets no
// ssl_requested_server_name, as in grpcio.
func (a *authProperties) addSession(ss *front.TLSSession) {
	a.add("ssl_session_reused", strconv.FormatBool(ss.Resumed))
	if ss.ServerName != "" {
		a.add("ssl_requested_server_name", ss.ServerName)
	}
	switch ss.Version {
	case tls.VersionTLS12:
		a.add("ssl_tls_version", "TLSv1.2")
	case tls.VersionTLS13:
		a.add("ssl_tls_version", "TLSv1.3")
	}
	if ss.Group != 0 {
		a.add("ssl_negotiated_key_exchange_group", groupName(ss.Group))
	}
}

// groupName is a key exchange group as grpc-core names it: the NIST
// curves by their OpenSSL short names, the others as BoringSSL's
// SSL_get_group_name writes them.
func groupName(g tls.CurveID) string {
	switch g {
	case tls.CurveP256:
		return "prime256v1"
	case tls.CurveP384:
		return "secp384r1"
	case tls.CurveP521:
		return "secp521r1"
	case tls.X25519:
		return "X25519"
	case tls.X25519MLKEM768:
		return "X25519MLKEM768"
	}
	return g.String()
}

// altNameProperty is grpc-core's property for each named kind of SAN.
var altNameProperty = map[front.AltNameKind]string{
	front.AltNameDNS:   "peer_dns",
	front.AltNameEmail: "peer_email",
	front.AltNameURI:   "peer_uri",
	front.AltNameIP:    "peer_ip",
}

// authProperties keeps properties in the order they were first added.
type authProperties []authProperty

func (a *authProperties) add(name, value string) { a.addBytes(name, []byte(value)) }

func (a *authProperties) addBytes(name string, value []byte) {
	for i := range *a {
		if (*a)[i].name == name {
			(*a)[i].values = append((*a)[i].values, value)
			return
		}
	}
	*a = append(*a, authProperty{name, [][]byte{value}})
}

// isSpiffeID is grpc-core's IsSpiffeId.
func isSpiffeID(uri string) bool {
	if !strings.HasPrefix(uri, "spiffe://") || len(uri) > 2048 {
		return false
	}
	parts := strings.Split(uri, "/")
	return len(parts) >= 4 && parts[3] != "" && len(parts[2]) <= 255
}
