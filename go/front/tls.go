package front

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// TLS: the server credentials (pygrpc_native.ssl_server_credentials) and the
// client identity that handlers read through auth_context().
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

// SetTLS makes the listeners bound from now on (Bind, or Start binding the
// configured address) serve TLS with cfg (nil: plaintext); it replaces the
// credentials the front was created with. Listeners bound earlier keep
// theirs. Only before Start.
func (f *Front) SetTLS(cfg *tls.Config) error {
	if err := f.checkNew(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkNew(); err != nil {
		return err
	}
	f.tls = cfg
	return nil
}

// AuthEntry is one key of grpcio's auth_context() with its values.
type AuthEntry struct {
	Name   string
	Values [][]byte
}

// Auth is a connection's identity as grpcio's ServicerContext reports it:
// auth_context() (Entries, keys in grpcio's order) and peer_identity_key()
// (PeerIdentityKey, "" for none); peer_identities() are the values of that
// key. grpcio's ssl_ keys (ssl_session_reused, ssl_tls_version, ...) are
// not reported.
type Auth struct {
	Entries         []AuthEntry
	PeerIdentityKey string
}

// Get returns the values of one key, nil if absent.
func (a *Auth) Get(name string) [][]byte {
	for _, e := range a.Entries {
		if e.Name == name {
			return e.Values
		}
	}
	return nil
}

func (a *Auth) add(name string, value []byte) {
	for i := range a.Entries {
		if a.Entries[i].Name == name {
			a.Entries[i].Values = append(a.Entries[i].Values, value)
			return
		}
	}
	a.Entries = append(a.Entries, AuthEntry{Name: name, Values: [][]byte{value}})
}

// insecureAuth is what grpcio reports for a plaintext connection.
var insecureAuth = &Auth{Entries: []AuthEntry{
	{"transport_security_type", [][]byte{[]byte("insecure")}},
	{"security_level", [][]byte{[]byte("TSI_SECURITY_NONE")}},
}}

// connAuth is the identity of the connection a call came on.
func connAuth(p *peer.Peer, ca *connAddr) *Auth {
	if p == nil {
		return insecureAuth
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return insecureAuth
	}
	if ca == nil {
		return tlsAuth(&ti.State)
	}
	ca.authOnce.Do(func() { ca.auth = tlsAuth(&ti.State) })
	return ca.auth
}

// tlsAuth builds grpcio's auth context of a TLS connection: with a client
// certificate, its subject (RFC 2253, as BoringSSL prints it), first common
// name, PEM and subject alternative names, each SAN also under its kind's
// key; the identity is the SANs, or the common name without any.
func tlsAuth(cs *tls.ConnectionState) *Auth {
	a := &Auth{}
	a.add("transport_security_type", []byte("ssl"))
	uris, spiffe := 0, ""
	if len(cs.PeerCertificates) > 0 {
		leaf := cs.PeerCertificates[0]
		a.add("x509_subject", []byte(formatSubject(leaf.RawSubject)))
		a.add("x509_common_name", []byte(firstCommonName(leaf.RawSubject)))
		a.PeerIdentityKey = "x509_common_name"
		a.add("x509_pem_cert", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}))
		for _, san := range subjectAltNames(leaf) {
			a.add("x509_subject_alternative_name", []byte(san.value))
			a.PeerIdentityKey = "x509_subject_alternative_name"
			if san.key != "" {
				a.add(san.key, []byte(san.value))
			}
			if san.key == "peer_uri" {
				uris++
				if isSpiffeID(san.value) {
					spiffe = san.value
				}
			}
		}
	}
	a.add("security_level", []byte("TSI_PRIVACY_AND_INTEGRITY"))
	// A SPIFFE certificate has exactly one URI SAN.
	if uris == 1 && spiffe != "" {
		a.add("peer_spiffe_id", []byte(spiffe))
	}
	return a
}

// isSpiffeID is grpc-core's IsSpiffeId.
func isSpiffeID(uri string) bool {
	if !strings.HasPrefix(uri, "spiffe://") || len(uri) > 2048 {
		return false
	}
	parts := strings.Split(uri, "/")
	return len(parts) >= 4 && parts[3] != "" && len(parts[2]) <= 255
}

type altName struct {
	key   string // peer_dns, peer_email, peer_uri, peer_ip; "" for other kinds
	value string
}

var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// subjectAltNames lists the SANs in certificate order, as grpc-core does
// (Go's x509 sorts them by kind). Kinds grpc-core doesn't name are "other
// types of SAN".
func subjectAltNames(c *x509.Certificate) []altName {
	var out []altName
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
				out = append(out, altName{"peer_email", latin1(v.Bytes)})
			case v.Class == asn1.ClassContextSpecific && v.Tag == 2:
				out = append(out, altName{"peer_dns", latin1(v.Bytes)})
			case v.Class == asn1.ClassContextSpecific && v.Tag == 6:
				out = append(out, altName{"peer_uri", latin1(v.Bytes)})
			case v.Class == asn1.ClassContextSpecific && v.Tag == 7:
				out = append(out, altName{"peer_ip", formatIP(v.Bytes)})
			default:
				out = append(out, altName{"", "other types of SAN"})
			}
		}
	}
	return out
}

// formatIP writes an address as inet_ntop does: netip's RFC 5952 form,
// except that IPv4-compatible addresses (::a.b.c.d) keep the dotted tail.
func formatIP(b []byte) string {
	switch len(b) {
	case 4:
		return netip.AddrFrom4([4]byte(b)).String()
	case 16:
		a := netip.AddrFrom16([16]byte(b))
		zero := true
		for _, x := range b[:12] {
			zero = zero && x == 0
		}
		if zero && (b[12] != 0 || b[13] != 0) {
			return "::" + netip.AddrFrom4([4]byte(b[12:])).String()
		}
		return a.String()
	}
	return "other types of SAN"
}

// attribute is one attribute of a distinguished name, its value as DER.
type attribute struct {
	Type  asn1.ObjectIdentifier
	Value asn1.RawValue
}

// rdnSET is a relative distinguished name (the SET suffix makes
// encoding/asn1 read a SET OF).
type rdnSET []attribute

func parseName(raw []byte) ([]rdnSET, error) {
	var rdns []rdnSET
	rest, err := asn1.Unmarshal(raw, &rdns)
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("trailing data after name")
	}
	return rdns, err
}

var oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}

// firstCommonName is the name's first common name as UTF-8, "" without one.
func firstCommonName(raw []byte) string {
	rdns, err := parseName(raw)
	if err != nil {
		return ""
	}
	for _, rdn := range rdns {
		for _, atv := range rdn {
			if atv.Type.Equal(oidCommonName) {
				s, _ := decodeString(atv.Value)
				return s
			}
		}
	}
	return ""
}

// formatSubject writes a distinguished name as BoringSSL's
// X509_NAME_print_ex(XN_FLAG_RFC2253) does, which is what grpcio reports as
// x509_subject: attributes last to first, "," between RDNs and "+" inside
// one, short attribute names, RFC 2253 escapes plus \XX for control
// characters and every byte of a non-ASCII character; attributes with no
// name are written as OID=#DER.
func formatSubject(raw []byte) string {
	rdns, err := parseName(raw)
	if err != nil {
		return ""
	}
	var flat []attribute
	var set []int
	for i, rdn := range rdns {
		for _, atv := range rdn {
			flat = append(flat, atv)
			set = append(set, i)
		}
	}
	var sb strings.Builder
	for i := len(flat) - 1; i >= 0; i-- {
		if i < len(flat)-1 {
			if set[i] == set[i+1] {
				sb.WriteByte('+')
			} else {
				sb.WriteByte(',')
			}
		}
		atv := flat[i]
		name, known := attributeNames[atv.Type.String()]
		if !known {
			sb.WriteString(atv.Type.String())
			sb.WriteByte('=')
			writeDump(&sb, atv.Value.FullBytes)
			continue
		}
		sb.WriteString(name)
		sb.WriteByte('=')
		s, ok := decodeString(atv.Value)
		if !ok {
			writeDump(&sb, atv.Value.FullBytes)
			continue
		}
		writeEscaped(&sb, s)
	}
	return sb.String()
}

func writeDump(sb *strings.Builder, der []byte) {
	fmt.Fprintf(sb, "#%X", der)
}

// writeEscaped escapes one value as BoringSSL's do_esc_char does with
// ASN1_STRFLGS_RFC2253, byte by byte of the UTF-8 encoding.
func writeEscaped(sb *strings.Builder, s string) {
	for i := 0; i < len(s); {
		_, n := utf8.DecodeRuneInString(s[i:])
		first, last := i == 0, i+n == len(s)
		for j := 0; j < n; j++ {
			c := s[i+j]
			switch {
			case c > 0x7f || c < 0x20 || c == 0x7f:
				fmt.Fprintf(sb, "\\%02X", c)
			case c == '\\' || c == '"' || c == ',' || c == '+' || c == '<' || c == '>' || c == ';':
				sb.WriteByte('\\')
				sb.WriteByte(c)
			case first && j == 0 && (c == ' ' || c == '#'):
				sb.WriteByte('\\')
				sb.WriteByte(c)
			case last && j == n-1 && c == ' ':
				sb.WriteString("\\ ")
			default:
				sb.WriteByte(c)
			}
		}
		i += n
	}
}

// decodeString converts a directory string to UTF-8 as BoringSSL's
// ASN1_STRING_to_UTF8 does: UTF8String as is, BMPString and
// UniversalString from UCS-2 / UCS-4, the single-byte types as Latin-1.
func decodeString(v asn1.RawValue) (string, bool) {
	if v.Class != asn1.ClassUniversal {
		return "", false
	}
	switch v.Tag {
	case asn1.TagUTF8String:
		return string(v.Bytes), true
	case asn1.TagPrintableString, asn1.TagIA5String, asn1.TagT61String, asn1.TagNumericString,
		26 /* VisibleString */, asn1.TagUTCTime, asn1.TagGeneralizedTime:
		return latin1(v.Bytes), true
	case asn1.TagBMPString:
		if len(v.Bytes)%2 != 0 {
			return "", false
		}
		u := make([]uint16, len(v.Bytes)/2)
		for i := range u {
			u[i] = uint16(v.Bytes[2*i])<<8 | uint16(v.Bytes[2*i+1])
		}
		return string(utf16.Decode(u)), true
	case 28: // UniversalString
		if len(v.Bytes)%4 != 0 {
			return "", false
		}
		var sb strings.Builder
		for i := 0; i < len(v.Bytes); i += 4 {
			r := rune(v.Bytes[i])<<24 | rune(v.Bytes[i+1])<<16 | rune(v.Bytes[i+2])<<8 | rune(v.Bytes[i+3])
			sb.WriteRune(r)
		}
		return sb.String(), true
	}
	return "", false
}

// latin1 reads bytes as Latin-1 (ASCII stays as it is).
func latin1(b []byte) string {
	ascii := true
	for _, c := range b {
		ascii = ascii && c < 0x80
	}
	if ascii {
		return string(b)
	}
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = utf8.AppendRune(out, rune(c))
	}
	return string(out)
}

// attributeNames are BoringSSL's short names of the attribute types found
// in subject names. BoringSSL knows more OIDs; the rest are printed as
// OID=#DER here (README: rare subject attributes can look different).
var attributeNames = map[string]string{
	"2.5.4.3":  "CN",
	"2.5.4.4":  "SN",
	"2.5.4.5":  "serialNumber",
	"2.5.4.6":  "C",
	"2.5.4.7":  "L",
	"2.5.4.8":  "ST",
	"2.5.4.9":  "street",
	"2.5.4.10": "O",
	"2.5.4.11": "OU",
	"2.5.4.12": "title",
	"2.5.4.13": "description",
	"2.5.4.14": "searchGuide",
	"2.5.4.15": "businessCategory",
	"2.5.4.16": "postalAddress",
	"2.5.4.17": "postalCode",
	"2.5.4.18": "postOfficeBox",
	"2.5.4.19": "physicalDeliveryOfficeName",
	"2.5.4.20": "telephoneNumber",
	"2.5.4.21": "telexNumber",
	"2.5.4.22": "teletexTerminalIdentifier",
	"2.5.4.23": "facsimileTelephoneNumber",
	"2.5.4.24": "x121Address",
	"2.5.4.25": "internationaliSDNNumber",
	"2.5.4.26": "registeredAddress",
	"2.5.4.27": "destinationIndicator",
	"2.5.4.28": "preferredDeliveryMethod",
	"2.5.4.29": "presentationAddress",
	"2.5.4.31": "member",
	"2.5.4.32": "owner",
	"2.5.4.33": "roleOccupant",
	"2.5.4.34": "seeAlso",
	"2.5.4.35": "userPassword",
	"2.5.4.36": "userCertificate",
	"2.5.4.37": "cACertificate",
	"2.5.4.38": "authorityRevocationList",
	"2.5.4.39": "certificateRevocationList",
	"2.5.4.40": "crossCertificatePair",
	"2.5.4.41": "name",
	"2.5.4.42": "GN",
	"2.5.4.43": "initials",
	"2.5.4.44": "generationQualifier",
	"2.5.4.45": "x500UniqueIdentifier",
	"2.5.4.46": "dnQualifier",
	"2.5.4.47": "enhancedSearchGuide",
	"2.5.4.48": "protocolInformation",
	"2.5.4.49": "distinguishedName",
	"2.5.4.50": "uniqueMember",
	"2.5.4.51": "houseIdentifier",
	"2.5.4.53": "deltaRevocationList",
	"2.5.4.54": "dmdName",
	"2.5.4.65": "pseudonym",
	"2.5.4.72": "role",

	"1.2.840.113549.1.9.1":  "emailAddress",
	"1.2.840.113549.1.9.2":  "unstructuredName",
	"1.2.840.113549.1.9.3":  "contentType",
	"1.2.840.113549.1.9.4":  "messageDigest",
	"1.2.840.113549.1.9.5":  "signingTime",
	"1.2.840.113549.1.9.6":  "countersignature",
	"1.2.840.113549.1.9.7":  "challengePassword",
	"1.2.840.113549.1.9.8":  "unstructuredAddress",
	"1.2.840.113549.1.9.9":  "extendedCertificateAttributes",
	"1.2.840.113549.1.9.20": "friendlyName",
	"1.2.840.113549.1.9.21": "localKeyID",

	"0.9.2342.19200300.100.1.1":  "UID",
	"0.9.2342.19200300.100.1.2":  "textEncodedORAddress",
	"0.9.2342.19200300.100.1.3":  "mail",
	"0.9.2342.19200300.100.1.4":  "info",
	"0.9.2342.19200300.100.1.5":  "favouriteDrink",
	"0.9.2342.19200300.100.1.6":  "roomNumber",
	"0.9.2342.19200300.100.1.8":  "userClass",
	"0.9.2342.19200300.100.1.10": "manager",
	"0.9.2342.19200300.100.1.13": "documentVersion",
	"0.9.2342.19200300.100.1.20": "homeTelephoneNumber",
	"0.9.2342.19200300.100.1.25": "DC",
	"0.9.2342.19200300.100.1.26": "aRecord",
	"0.9.2342.19200300.100.1.37": "associatedDomain",
	"0.9.2342.19200300.100.1.41": "mobileTelephoneNumber",
	"0.9.2342.19200300.100.1.42": "pagerTelephoneNumber",
	"0.9.2342.19200300.100.1.43": "friendlyCountryName",
	"0.9.2342.19200300.100.1.45": "organizationalStatus",
}

// authCache is the identity of one connection, computed on first request.
type authCache struct {
	authOnce sync.Once
	auth     *Auth
}
