package main

import (
	"crypto/tls"
	"strings"
	"testing"

	"github.com/pygrpc-native/pygrpc-native/go/front"
)

// flatten writes properties as "name=v1|v2" lines, in order.
func flatten(props []authProperty) string {
	var lines []string
	for _, p := range props {
		var vs []string
		for _, v := range p.values {
			vs = append(vs, string(v))
		}
		lines = append(lines, p.name+"="+strings.Join(vs, "|"))
	}
	return strings.Join(lines, "\n")
}

func TestAuthContextOfAClientCertificate(t *testing.T) {
	s := &front.ConnSecurity{TLS: true, Cert: &front.ClientCert{
		Subject:    `CN=client,O=Example\, Inc.`,
		CommonName: "client",
		PEM:        []byte("PEM"),
		AltNames: []front.AltName{
			{Kind: front.AltNameDNS, Value: "client.example.com"},
			{Kind: front.AltNameEmail, Value: "client@example.com"},
			{Kind: front.AltNameIP, Value: "10.0.0.1"},
			{Kind: front.AltNameURI, Value: "spiffe://example.com/workload"},
			{Kind: front.AltNameOther},
		},
	}}
	props, key := authContext(s)
	// grpc-core's order: each property where it first appears.
	want := strings.Join([]string{
		"transport_security_type=ssl",
		`x509_subject=CN=client,O=Example\, Inc.`,
		"x509_common_name=client",
		"x509_pem_cert=PEM",
		"x509_subject_alternative_name=client.example.com|client@example.com|10.0.0.1|spiffe://example.com/workload|other types of SAN",
		"peer_dns=client.example.com",
		"peer_email=client@example.com",
		"peer_ip=10.0.0.1",
		"peer_uri=spiffe://example.com/workload",
		"security_level=TSI_PRIVACY_AND_INTEGRITY",
		"peer_spiffe_id=spiffe://example.com/workload",
	}, "\n")
	if got := flatten(props); got != want {
		t.Errorf("auth context:\n%s\nwant:\n%s", got, want)
	}
	if key != "x509_subject_alternative_name" {
		t.Errorf("peer identity key %q, want the SANs", key)
	}
}

func TestAuthContextIdentityIsTheCommonNameWithoutSANs(t *testing.T) {
	props, key := authContext(&front.ConnSecurity{TLS: true, Cert: &front.ClientCert{CommonName: "client"}})
	if key != "x509_common_name" {
		t.Errorf("peer identity key %q, want x509_common_name", key)
	}
	if strings.Contains(flatten(props), "peer_spiffe_id") {
		t.Errorf("a SPIFFE id without a URI SAN: %s", flatten(props))
	}
}

func TestAuthContextSpiffeNeedsExactlyOneURI(t *testing.T) {
	uri := front.AltName{Kind: front.AltNameURI, Value: "spiffe://example.com/a"}
	props, _ := authContext(&front.ConnSecurity{TLS: true, Cert: &front.ClientCert{AltNames: []front.AltName{uri, uri}}})
	if strings.Contains(flatten(props), "peer_spiffe_id") {
		t.Errorf("two URI SANs gave a SPIFFE id: %s", flatten(props))
	}
}

func TestAuthContextWithoutClientCertificate(t *testing.T) {
	for _, tc := range []struct {
		security *front.ConnSecurity
		want     string
	}{
		{&front.ConnSecurity{}, "transport_security_type=insecure\nsecurity_level=TSI_SECURITY_NONE"},
		{&front.ConnSecurity{TLS: true}, "transport_security_type=ssl\nsecurity_level=TSI_PRIVACY_AND_INTEGRITY"},
	} {
		props, key := authContext(tc.security)
		if got := flatten(props); got != tc.want || key != "" {
			t.Errorf("%+v: %q with identity key %q, want %q and none", tc.security, got, key, tc.want)
		}
	}
}

func TestAuthContextSSLKeysAsGrpcCore(t *testing.T) {
	for _, tc := range []struct {
		session *front.TLSSession
		want    string
	}{
		{&front.TLSSession{Version: tls.VersionTLS13, Group: tls.X25519MLKEM768, ServerName: "localhost"},
			"ssl_session_reused=false\nssl_requested_server_name=localhost\nssl_tls_version=TLSv1.3\nssl_negotiated_key_exchange_group=X25519MLKEM768"},
		{&front.TLSSession{Resumed: true, Version: tls.VersionTLS12, Group: tls.CurveP256},
			"ssl_session_reused=true\nssl_tls_version=TLSv1.2\nssl_negotiated_key_exchange_group=prime256v1"},
		{&front.TLSSession{Version: tls.VersionTLS13, Group: tls.X25519}, "ssl_session_reused=false\nssl_tls_version=TLSv1.3\nssl_negotiated_key_exchange_group=X25519"},
	} {
		props, _ := authContext(&front.ConnSecurity{TLS: true, Session: tc.session})
		want := "transport_security_type=ssl\nsecurity_level=TSI_PRIVACY_AND_INTEGRITY\n" + tc.want
		if got := flatten(props); got != want {
			t.Errorf("%+v: got\n%s\nwant\n%s", tc.session, got, want)
		}
	}
}

func TestAuthContextOfLocalCredentials(t *testing.T) {
	props, key := authContext(&front.ConnSecurity{Local: true})
	if got := flatten(props); got != "transport_security_type=local\nsecurity_level=TSI_PRIVACY_AND_INTEGRITY" || key != "transport_security_type" {
		t.Errorf("local: %q, identity key %q", got, key)
	}
}

func TestIsSpiffeIDAsGrpcCore(t *testing.T) {
	for uri, want := range map[string]bool{
		"spiffe://a/b":   true,
		"spiffe://a/b/":  true,
		"spiffe://a/b?x": true,
		"spiffe://a":     false,
		"spiffe://a/":    false,
		"SPIFFE://a/b":   false,
		"https://a/b":    false,
		"spiffe://" + strings.Repeat("h", 256) + "/b": false,
	} {
		if got := isSpiffeID(uri); got != want {
			t.Errorf("isSpiffeID(%q) = %v", uri, got)
		}
	}
}
