package front

import (
	"encoding/asn1"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Distinguished names printed as BoringSSL prints them, for
// ClientCert.Subject and CommonName (grpcio reports what BoringSSL prints).

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
