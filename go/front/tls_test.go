package front

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// issued is a key and certificate in PEM.
type issued struct {
	key, cert []byte
	tlsCert   tls.Certificate
	parsed    *x509.Certificate
	signer    *ecdsa.PrivateKey
}

// issue makes a certificate for tmpl signed by ca (self-signed when ca is
// nil).
func issue(t *testing.T, tmpl *x509.Certificate, ca *issued) *issued {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(time.Hour)
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.parsed, ca.signer
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	out := &issued{
		key:    pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		cert:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		parsed: parsed,
		signer: key,
	}
	out.tlsCert, err = tls.X509KeyPair(out.cert, out.key)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func newCA(t *testing.T, name string) *issued {
	return issue(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil)
}

type testPKI struct {
	ca, server, client, otherClient *issued
}

func newTestPKI(t *testing.T) *testPKI {
	ca := newCA(t, "test CA")
	other := newCA(t, "other CA")
	spiffe, _ := url.Parse("spiffe://example.com/workload")
	p := &testPKI{ca: ca}
	p.server = issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca)
	p.client = issue(t, &x509.Certificate{
		Subject:        pkix.Name{CommonName: "client", Organization: []string{"Example, Inc."}},
		DNSNames:       []string{"client.example.com"},
		EmailAddresses: []string{"client@example.com"},
		IPAddresses:    []net.IP{net.ParseIP("10.0.0.1")},
		URIs:           []*url.URL{spiffe},
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca)
	p.otherClient = issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "intruder"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, other)
	return p
}

// tlsDoc is the "tls" member of a config.
func tlsDoc(key, chain, roots []byte, require bool) string {
	m := map[string]any{
		"pairs":               [][2]string{{base64.StdEncoding.EncodeToString(key), base64.StdEncoding.EncodeToString(chain)}},
		"require_client_auth": require,
	}
	if roots != nil {
		m["roots"] = base64.StdEncoding.EncodeToString(roots)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func TestParseTLSRefusesBadCredentials(t *testing.T) {
	p := newTestPKI(t)
	other := newCA(t, "x")
	corrupt := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")})
	encrypted := []byte("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n")
	cases := []struct {
		name, doc, want string
	}{
		{"garbage key", tlsDoc([]byte("junk"), p.server.cert, nil, false), "private key holds no PEM private key"},
		{"corrupt key", tlsDoc(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("x")}), p.server.cert, nil, false), "private key cannot be read"},
		{"encrypted key", tlsDoc(encrypted, p.server.cert, nil, false), "encrypted"},
		{"garbage chain", tlsDoc(p.server.key, []byte("junk"), nil, false), "certificate chain holds no PEM certificate"},
		{"corrupt chain", tlsDoc(p.server.key, corrupt, nil, false), "certificate chain: certificate 1 cannot be read"},
		{"mismatched key", tlsDoc(other.key, p.server.cert, nil, false), "does not match"},
		{"empty roots", tlsDoc(p.server.key, p.server.cert, []byte{}, false), "root_certificates holds no PEM certificate"},
		{"garbage roots", tlsDoc(p.server.key, p.server.cert, []byte("junk"), true), "root_certificates holds no PEM certificate"},
		{"corrupt roots", tlsDoc(p.server.key, p.server.cert, corrupt, true), "root_certificates: certificate 1 cannot be read"},
		{"require without roots", tlsDoc(p.server.key, p.server.cert, nil, true), "require_client_auth needs root_certificates"},
		{"not json", `{"pairs": 1}`, "invalid TLS credentials"},
		{"no pairs", `{"pairs": []}`, "at least one"},
		{"bad local", `{"local": "tcp6"}`, "local credentials"},
	}
	for _, c := range cases {
		_, err := ParseTLS([]byte(c.doc))
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want a ConfigError containing %q", c.name, err, c.want)
		}
	}
	if cfg, err := ParseTLS([]byte("null")); cfg != nil || err != nil {
		t.Errorf("null: got %v, %v; want plaintext", cfg, err)
	}
	sec, err := ParseTLS([]byte(tlsDoc(p.server.key, append(p.server.cert, p.ca.cert...), p.ca.cert, true)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := sec.source.current.Load()
	if cfg.MinVersion != tls.VersionTLS12 || cfg.ClientAuth != tls.RequestClientCert || cfg.NextProtos[0] != "h2" {
		t.Errorf("unexpected config: min %x, client auth %v, ALPN %v", cfg.MinVersion, cfg.ClientAuth, cfg.NextProtos)
	}
	// Go doesn't verify the client's chain (RequestClientCert): the
	// configuration does, even used as it is, without refuseClient.
	for _, cert := range []*issued{nil, p.otherClient} {
		srv, cli := net.Pipe()
		go func() {
			c := tls.Client(cli, clientTLS(p, cert))
			if c.Handshake() == nil {
				_, _ = io.Copy(io.Discard, c) // what the server sends after its handshake
			}
			cli.Close()
		}()
		if err := tls.Server(srv, cfg).Handshake(); err == nil {
			t.Errorf("client certificate %v: the configuration served it", cert != nil)
		}
		srv.Close()
	}
	// As grpcio: roots without require_client_auth ask for no certificate.
	sec, err = ParseTLS([]byte(tlsDoc(p.server.key, p.server.cert, p.ca.cert, false)))
	if err != nil || sec.source.current.Load().ClientAuth != tls.NoClientCert {
		t.Errorf("roots without require: got %v; want NoClientCert", err)
	}
	if _, err := ParseConfig([]byte(`{"address": "127.0.0.1:0", "methods": [], "tls": ` + tlsDoc(other.key, p.server.cert, nil, false) + `}`)); err == nil {
		t.Error("ParseConfig accepted a mismatched key")
	}
	// The older X509 CERTIFICATE label, which OpenSSL (so grpcio) reads, in
	// the chain and the roots.
	relabel := func(b []byte) []byte {
		return bytes.ReplaceAll(b, []byte(" CERTIFICATE-----"), []byte(" X509 CERTIFICATE-----"))
	}
	if _, err := ParseTLS([]byte(tlsDoc(p.server.key, relabel(p.server.cert), relabel(p.ca.cert), true))); err != nil {
		t.Errorf("a chain and roots labelled X509 CERTIFICATE: %v", err)
	}
}

// startTLSFront serves sayPath over TLS; every call answers with the
// identity Details reports, as JSON.
func startTLSFront(t *testing.T, p *testPKI, roots []byte, require bool) *Front {
	t.Helper()
	f := startConfigured(t, fmt.Sprintf(`{"address": "127.0.0.1:0", "methods": [[%q, false]], "tls": %s}`,
		sayPath, tlsDoc(p.server.key, p.server.cert, roots, require)))
	answerWithDetails(t, f, func(d CallDetails) []byte {
		out, _ := json.Marshal(d.Security)
		return out
	})
	return f
}

// answerWithDetails answers every call of a started front with what answer
// makes of the call's Details, until the front stops (at the test's end).
func answerWithDetails(t *testing.T, f *Front, answer func(CallDetails) []byte) {
	go func() {
		for {
			batch, closed := f.Events().Recv(16, math.MaxInt, -1)
			if closed {
				return
			}
			for _, e := range batch {
				if e.Kind == EventCall {
					d, _ := f.Calls().Details(e.CallID)
					f.Calls().Respond(e.CallID, msg(string(answer(d))), SendWait)
				}
			}
		}
	}()
	t.Cleanup(func() { f.Stop(-1) })
}

// callTLS makes one call with cfg and returns what the server learnt of
// the connection's security.
func callTLS(t *testing.T, f *Front, cfg *tls.Config) (*ConnSecurity, error) {
	t.Helper()
	cc, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", f.Port()),
		grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(clientCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var resp []byte
	req := []byte("hi")
	if err := cc.Invoke(ctx, sayPath, &req, &resp); err != nil {
		return nil, err
	}
	var a ConnSecurity
	if err := json.Unmarshal(resp, &a); err != nil {
		t.Fatal(err)
	}
	return &a, nil
}

func clientTLS(p *testPKI, cert *issued) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.parsed)
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost"}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{cert.tlsCert}
	}
	return cfg
}

func TestMutualTLSIdentity(t *testing.T) {
	p := newTestPKI(t)
	f := startTLSFront(t, p, p.ca.cert, true)
	a, err := callTLS(t, f, clientTLS(p, p.client))
	if err != nil {
		t.Fatal(err)
	}
	if !a.TLS || a.Cert == nil {
		t.Fatalf("got %+v, want TLS with a client certificate", a)
	}
	c := a.Cert
	if c.Subject != `CN=client,O=Example\, Inc.` || c.CommonName != "client" || string(c.PEM) != string(p.client.cert) {
		t.Errorf("subject %q, common name %q, PEM %q", c.Subject, c.CommonName, c.PEM)
	}
	// In certificate order; Go's x509 writes SANs DNS, email, IP, URI.
	want := []AltName{
		{AltNameDNS, "client.example.com"},
		{AltNameEmail, "client@example.com"},
		{AltNameIP, "10.0.0.1"},
		{AltNameURI, "spiffe://example.com/workload"},
	}
	if fmt.Sprint(c.AltNames) != fmt.Sprint(want) {
		t.Errorf("alt names %v, want %v", c.AltNames, want)
	}
}

func TestMutualTLSRefusesClients(t *testing.T) {
	p := newTestPKI(t)
	f := startTLSFront(t, p, p.ca.cert, true)
	if _, err := callTLS(t, f, clientTLS(p, nil)); err == nil {
		t.Error("a client without a certificate was served")
	}
	if _, err := callTLS(t, f, clientTLS(p, p.otherClient)); err == nil {
		t.Error("a client with another CA's certificate was served")
	}
	// A key usage that doesn't allow signing (the client signs its
	// CertificateVerify with that key): BoringSSL refuses it for grpcio,
	// Go's Verify doesn't look.
	encipherOnly := issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "encipher only"},
		KeyUsage:    x509.KeyUsageKeyAgreement,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, p.ca)
	if _, err := callTLS(t, f, clientTLS(p, encipherOnly)); err == nil {
		t.Error("a client whose certificate's key usage doesn't allow signing was served")
	}
}

// TestMutualTLSRefusesWithoutAlert: a refused client's TLS 1.3 handshake
// completes on its side; it then reads the connection closed (EOF), as
// from grpcio's server, not an alert (which grpcio's clients log as data
// corruption), and no reset though it had sent its preface.
func TestMutualTLSRefusesWithoutAlert(t *testing.T) {
	p := newTestPKI(t)
	f := startTLSFront(t, p, p.ca.cert, true)
	for _, cert := range []*issued{nil, p.otherClient} {
		cfg := clientTLS(p, cert)
		cfg.NextProtos = []string{"h2"}
		c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", f.Port()), cfg)
		if err != nil {
			t.Fatalf("the client's side of the handshake: %v", err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Read(make([]byte, 64)); n != 0 || err != io.EOF {
			t.Errorf("client certificate %v: read %d bytes, %v; want the connection closed (EOF)", cert != nil, n, err)
		}
		c.Close()
	}
}

func TestServerTLSWithoutClientCertificates(t *testing.T) {
	p := newTestPKI(t)
	// Roots without require_client_auth: as grpcio, no certificate is
	// asked for, so a presented one (even another CA's) is not used.
	f := startTLSFront(t, p, p.ca.cert, false)
	for _, cert := range []*issued{nil, p.client, p.otherClient} {
		a, err := callTLS(t, f, clientTLS(p, cert))
		if err != nil {
			t.Fatal(err)
		}
		if !a.TLS || a.Cert != nil {
			t.Errorf("got %+v, want TLS without a client certificate", a)
		}
	}
}

func TestTLSVersionsAndALPN(t *testing.T) {
	p := newTestPKI(t)
	f := startTLSFront(t, p, nil, false)
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		cfg := clientTLS(p, nil)
		cfg.MinVersion, cfg.MaxVersion = v, v
		if _, err := callTLS(t, f, cfg); err != nil {
			t.Errorf("TLS %x: %v", v, err)
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", f.Port())
	cfg := clientTLS(p, nil)
	cfg.MinVersion, cfg.MaxVersion, cfg.NextProtos = tls.VersionTLS11, tls.VersionTLS11, []string{"h2"}
	if c, err := tls.Dial("tcp", addr, cfg); err == nil {
		c.Close()
		t.Error("TLS 1.1 was accepted")
	}
	cfg = clientTLS(p, nil)
	cfg.NextProtos = []string{"h2"}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ConnectionState().NegotiatedProtocol; got != "h2" {
		t.Errorf("ALPN %q, want h2", got)
	}
	c.Close()
}

func TestPlaintextDetailsAreInsecure(t *testing.T) {
	var got *ConnSecurity
	done := make(chan struct{})
	f, cc := startFront(t, "", func(f *Front, e Event) {
		if e.Kind == EventCall {
			d, _ := f.Calls().Details(e.CallID)
			got = d.Security
			f.Calls().Respond(e.CallID, nil, SendWait)
			close(done)
		}
	})
	_ = f
	if _, err := say(context.Background(), cc, "x"); err != nil {
		t.Fatal(err)
	}
	<-done
	if got != plaintextSecurity {
		t.Errorf("plaintext security %+v", got)
	}
}

func TestSetTLSOnlyBeforeStart(t *testing.T) {
	p := newTestPKI(t)
	cfg, err := ParseConfig([]byte(fmt.Sprintf(`{"address": "127.0.0.1:0", "methods": [[%q, false]]}`, sayPath)))
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop(-1)
	tc, err := ParseTLS([]byte(tlsDoc(p.server.key, p.server.cert, nil, false)))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.SetTLS(tc); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	var le *LifecycleError
	if err := f.SetTLS(nil); !errors.As(err, &le) {
		t.Errorf("SetTLS after Start: %v", err)
	}
	c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", f.Port()), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("the front set to TLS before Start doesn't serve TLS: %v", err)
	}
	c.Close()
}

// name builds a raw distinguished name: each inner slice is one RDN.
func name(t *testing.T, rdns ...[]pkix.AttributeTypeAndValue) []byte {
	t.Helper()
	var seq pkix.RDNSequence
	for _, rdn := range rdns {
		seq = append(seq, pkix.RelativeDistinguishedNameSET(rdn))
	}
	raw, err := asn1.Marshal(seq)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func atv(oid asn1.ObjectIdentifier, v any) []pkix.AttributeTypeAndValue {
	return []pkix.AttributeTypeAndValue{{Type: oid, Value: v}}
}

var (
	oidC   = asn1.ObjectIdentifier{2, 5, 4, 6}
	oidO   = asn1.ObjectIdentifier{2, 5, 4, 10}
	oidOU  = asn1.ObjectIdentifier{2, 5, 4, 11}
	oidCN  = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidUID = asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 1}
)

// Expected strings are what grpcio 1.85 reports as x509_subject for the
// same names.
func TestFormatSubjectAsBoringSSL(t *testing.T) {
	cases := []struct {
		raw  []byte
		want string
	}{
		{name(t), ""},
		{name(t, atv(oidC, "US"), atv(oidO, "Example, Inc."), atv(oidCN, "test-client")),
			`CN=test-client,O=Example\, Inc.,C=US`},
		{name(t, atv(oidCN, ` #lead, a+b "q" <x>;y=z\ trail `)),
			`CN=\ #lead\, a\+b \"q\" \<x\>\;y=z\\ trail\ `},
		{name(t, atv(oidCN, "#hash")), `CN=\#hash`},
		{name(t, atv(oidCN, "  ")), `CN=\ \ `},
		{name(t, atv(oidCN, "tab\there\x01")), `CN=tab\09here\01`},
		{name(t, atv(oidCN, "Zoë 日本")), `CN=Zo\C3\AB \E6\97\A5\E6\9C\AC`},
		{name(t, atv(oidCN, "a\x7fb"), atv(oidO, "x")), `O=x,CN=a\7Fb`},
		{name(t, []pkix.AttributeTypeAndValue{{Type: oidOU, Value: "b"}, {Type: oidCN, Value: "a"}, {Type: oidUID, Value: "u"}}, atv(oidC, "US")),
			`C=US,UID=u+OU=b+CN=a`},
		// Unknown types are dumped as DER (encoding/asn1 writes a
		// PrintableString, 0x13; grpcio's test had a UTF8String, 0x0C).
		{name(t, atv(asn1.ObjectIdentifier{1, 2, 3, 4, 5}, "unknown")), `1.2.3.4.5=#1307756E6B6E6F776E`},
		{name(t, atv(asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 1}, "me@example.com")), `emailAddress=me@example.com`},
	}
	for _, c := range cases {
		if got := formatSubject(c.raw); got != c.want {
			t.Errorf("formatSubject = %q, want %q", got, c.want)
		}
	}
	if got := firstCommonName(name(t, atv(oidCN, "first"), atv(oidCN, "second"))); got != "first" {
		t.Errorf("first common name %q", got)
	}
	if got := firstCommonName(name(t, atv(oidO, "Org"))); got != "" {
		t.Errorf("common name of a name without one: %q", got)
	}
}

func TestDecodeStringTypes(t *testing.T) {
	cases := []struct {
		v    asn1.RawValue
		want string
	}{
		{asn1.RawValue{Tag: asn1.TagT61String, Bytes: []byte("a\xc3\xa9")}, "aÃ©"}, // Latin-1, as BoringSSL
		{asn1.RawValue{Tag: asn1.TagBMPString, Bytes: []byte{0, 'a', 0, 0xe9, 0x20, 0xac}}, "aé€"},
		{asn1.RawValue{Tag: 28, Bytes: []byte{0, 0, 0, 'a', 0, 1, 0xd1, 0x1e}}, "a𝄞"},
		{asn1.RawValue{Tag: asn1.TagUTF8String, Bytes: []byte("é")}, "é"},
	}
	for _, c := range cases {
		if got, ok := decodeString(c.v); !ok || got != c.want {
			t.Errorf("decodeString(tag %d) = %q, %v; want %q", c.v.Tag, got, ok, c.want)
		}
	}
}

func TestFormatIPAsInetNtop(t *testing.T) {
	for in, want := range map[string]string{
		"10.1.2.3":             "10.1.2.3",
		"2001:db8::1":          "2001:db8::1",
		"::ffff:1.2.3.4":       "::ffff:1.2.3.4",
		"2001:db8:0:0:1:0:0:1": "2001:db8::1:0:0:1",
		"::1.2.3.4":            "::1.2.3.4",
		"2001:db8::":           "2001:db8::",
		"::1":                  "::1",
		"::":                   "::",
	} {
		ip := net.ParseIP(in)
		b := []byte(ip.To16())
		if ip4 := ip.To4(); ip4 != nil && !strings.Contains(in, ":") {
			b = []byte(ip4)
		}
		if got := ipAltName(b); got != (AltName{AltNameIP, want}) {
			t.Errorf("ipAltName(%s) = %v, want %q", in, got, want)
		}
	}
	if got := ipAltName([]byte{1, 2, 3}); got != (AltName{Kind: AltNameOther}) {
		t.Errorf("a 3-byte address: %v, want a SAN of no named kind", got)
	}
}

// TestTLS12SuitesAreGRPCCores: a TLS 1.2 client offering only suites
// outside grpc-core's default list (CBC with SHA-1, ChaCha20) is refused,
// as grpcio's server refuses it; one offering an AES-GCM suite is served.
func TestTLS12SuitesAreGRPCCores(t *testing.T) {
	p := newTestPKI(t)
	f := startTLSFront(t, p, nil, false)
	addr := fmt.Sprintf("127.0.0.1:%d", f.Port())
	for suite, served := range map[uint16]bool{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA:          false,
		tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA:            false,
		tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256: false,
		tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256:   false,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384:       true, // the test PKI's keys are ECDSA
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256:       true,
	} {
		cfg := clientTLS(p, nil)
		cfg.MinVersion, cfg.MaxVersion, cfg.CipherSuites, cfg.NextProtos = tls.VersionTLS12, tls.VersionTLS12, []uint16{suite, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256}, []string{"h2"}
		c, err := tls.Dial("tcp", addr, cfg)
		if err == nil {
			c.Close()
		}
		if (err == nil) != served {
			t.Errorf("%s: handshake error %v, want served=%v", tls.CipherSuiteName(suite), err, served)
		}
	}
}

// TestEntryMatchesAsGrpcCore: how a certificate's name matches a server
// name, as grpc-core's does_entry_match_name (checked against grpcio
// 1.85.1 serving several pairs).
func TestEntryMatchesAsGrpcCore(t *testing.T) {
	cases := []struct {
		entry, name string
		want        bool
	}{
		{"localhost", "localhost", true},
		{"LocalHost", "localhost", true},
		{"exact.test.", "exact.test", true}, // trailing dots dropped, either side
		{"exact.test", "exact.test.", true},
		{".", "", false},
		{"", "", false},
		{"*.x.test", "a.x.test", true},
		{"*.x.test.", "a.x.test", true},
		{"*.X.TEST", "a.x.test", true},
		{"*.x.test", "a.b.x.test", false}, // one label only
		{"*.x.test", "x.test", false},
		{"*.localhost", "api.localhost", false}, // a top-level parent
		{"*.com", "a.com", false},
		{"*", "a", false},
		{"*.", "a.b", false},
		{"f*.x.test", "foo.x.test", false}, // partial wildcards are literal
		{"f*.x.test", "f*.x.test", true},
		{"a.*.test", "a.b.test", false},
		{"*.*.test", "a.b.test", false},
	}
	for _, c := range cases {
		if got := entryMatches(c.entry, c.name); got != c.want {
			t.Errorf("entryMatches(%q, %q) = %v, want %v", c.entry, c.name, got, c.want)
		}
	}
	// The common name counts only without SANs, and is matched the same
	// way (a wildcard included); an IP is matched as text, SANs only.
	cn := certNames{commonName: "*.cnwild.test"}
	withSANs := certNames{sans: []string{"spiffe://x.test/a", "127.0.0.1"}}
	for _, c := range []struct {
		names certNames
		name  string
		want  bool
	}{
		{cn, "a.cnwild.test", true},
		{cn, "cnwild.test", false},
		{withSANs, "127.0.0.1", true},
		{withSANs, "x.test", false},
		{certNames{commonName: "127.0.0.1"}, "127.0.0.1", false},
	} {
		if got := c.names.match(c.name); got != c.want {
			t.Errorf("%+v.match(%q) = %v, want %v", c.names, c.name, got, c.want)
		}
	}
}
