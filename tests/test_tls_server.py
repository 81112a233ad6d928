"""TLS and mutual TLS under pygrpc_native.server(), compared with
grpc.server() for the same certificates.

Each case starts a server of each kind with the same grpcio credentials
(grpc.ssl_server_credentials), calls it with one grpcio secure channel,
and compares what the client saw and what the handler read from its
context: auth_context() (grpcio's ssl_ keys included), peer_identities(),
peer_identity_key().

aio.server() shares the ports and credentials code; test_tls_aio.py checks
its identity and refusals against grpc.aio.server(). More aio cases (the
identity formats below) are still to be added there.
"""

import contextlib
import ipaddress
import socket
import ssl
from concurrent import futures

import grpc
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

import pygrpc_native
from diff.harness import KINDS, WAIT, State, factory
from tls_certs import issue, make_pki, name

pytestmark = pytest.mark.timeout(120)

SERVICE = "tls.Tls"
CALL_TIMEOUT = 5.0
A = x509.NameAttribute


@pytest.fixture(scope="module")
def pki():
    return make_pki()


def server_credentials(kind, pki, *, roots=None, require=False):
    # The same grpcio credentials for both: a grpcio user changes only the
    # line that creates the server.
    return grpc.ssl_server_credentials([(pki.server.key, pki.server.chain)], roots, require)


def _record(state, name):
    def handler(request, context):
        state.record(
            name,
            {
                "auth_context": context.auth_context(),
                "peer_identities": context.peer_identities(),
                "peer_identity_key": context.peer_identity_key(),
                "peer": context.peer(),
            },
        )
        return request

    return handler


def _record_stream(state):
    def handler(request_iterator, context):
        state.record(
            "stream",
            {
                "auth_context": context.auth_context(),
                "peer_identities": context.peer_identities(),
                "peer_identity_key": context.peer_identity_key(),
                "peer": context.peer(),
            },
        )
        return b"".join(request_iterator)

    return handler


def _count(request, context):
    for i in range(3):
        yield bytes([i])


@contextlib.contextmanager
def serving(kind, creds):
    """A started server of one kind on a TLS port; yields (port, state)."""
    state = State()
    pool = futures.ThreadPoolExecutor(4, thread_name_prefix=f"tls-{kind}")
    server = factory(kind)(pool)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                SERVICE,
                {
                    "Who": grpc.unary_unary_rpc_method_handler(_record(state, "who")),
                    "Count": grpc.unary_stream_rpc_method_handler(_count),
                    "Collect": grpc.stream_unary_rpc_method_handler(_record_stream(state)),
                },
            ),
        )
    )
    port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    try:
        yield port, state
    finally:
        server.stop(0).wait(WAIT)
        pool.shutdown(wait=False, cancel_futures=True)


def channel_credentials(pki, client=None):
    if client is None:
        return grpc.ssl_channel_credentials(pki.ca.cert)
    return grpc.ssl_channel_credentials(pki.ca.cert, client.key, client.chain)


def observe(kind, pki, client=None, *, roots=None, require=False):
    """What one call to a TLS server of this kind shows: the client's status
    and the identity the handler read (None if the call failed)."""
    with serving(kind, server_credentials(kind, pki, roots=roots, require=require)) as (port, state):
        # A channel of its own: grpcio shares connections between channels.
        options = [("grpc.use_local_subchannel_pool", 1)]
        with grpc.secure_channel(f"127.0.0.1:{port}", channel_credentials(pki, client), options) as ch:
            try:
                ch.unary_unary(f"/{SERVICE}/Who")(b"hi", timeout=CALL_TIMEOUT)
            except grpc.RpcError as err:
                return {"code": err.code(), "details": err.details().replace(f":{port}:", ":<port>:")}
        seen = state.wait_for("who")
        seen["peer"] = seen["peer"].rsplit(":", 1)[0]
        return {"code": grpc.StatusCode.OK, **seen}


def same(pki, client=None, **kwargs):
    ref, ours = (observe(kind, pki, client, **kwargs) for kind in KINDS)
    assert ours == ref, f"\n  grpc.server():          {ref!r}\n  pygrpc_native.server(): {ours!r}"
    return ref


# -- server authentication ------------------------------------------------------


def test_server_auth_tls(pki):
    got = same(pki)
    assert got["code"] == grpc.StatusCode.OK
    assert got["auth_context"] == {
        "transport_security_type": [b"ssl"],
        "security_level": [b"TSI_PRIVACY_AND_INTEGRITY"],
        # No ssl_requested_server_name: a client of 127.0.0.1 sends no SNI.
        "ssl_session_reused": [b"false"],
        "ssl_tls_version": [b"TLSv1.3"],
        "ssl_negotiated_key_exchange_group": [b"X25519MLKEM768"],
    }
    assert got["peer_identities"] is None and got["peer_identity_key"] is None
    assert got["peer"] == "ipv4:127.0.0.1"


def test_server_streaming_over_tls(pki):
    for kind in KINDS:
        with serving(kind, server_credentials(kind, pki)) as (port, _state):
            with grpc.secure_channel(f"127.0.0.1:{port}", channel_credentials(pki)) as ch:
                assert list(ch.unary_stream(f"/{SERVICE}/Count")(b"", timeout=CALL_TIMEOUT)) == [b"\0", b"\1", b"\2"]


def test_plaintext_client_is_refused(pki):
    for kind in KINDS:
        with serving(kind, server_credentials(kind, pki)) as (port, _state):
            with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                with pytest.raises(grpc.RpcError) as err:
                    ch.unary_unary(f"/{SERVICE}/Who")(b"", timeout=CALL_TIMEOUT)
                assert err.value.code() == grpc.StatusCode.UNAVAILABLE, kind


# -- mutual TLS -----------------------------------------------------------------


def test_mutual_tls_identity(pki):
    got = same(pki, pki.client, roots=pki.ca.cert, require=True)
    assert got["code"] == grpc.StatusCode.OK
    auth = got["auth_context"]
    sans = [
        b"client.example.com",
        b"*.clients.example.com",
        b"10.1.2.3",
        b"2001:db8::1",
        b"spiffe://example.com/ns/default/sa/client",
        b"client@example.com",
    ]
    # What grpcio reports, pinned.
    assert auth["x509_common_name"] == [b"test-client"]
    assert auth["x509_subject"] == [
        b"CN=test-client,OU=Engineering,O=Example\\, Inc.,L=San Francisco,ST=California,C=US"
    ]
    assert auth["x509_pem_cert"] == [pki.client.cert]
    assert auth["x509_subject_alternative_name"] == sans
    assert auth["peer_dns"] == sans[:2]
    assert auth["peer_ip"] == sans[2:4]
    assert auth["peer_uri"] == auth["peer_spiffe_id"] == [sans[4]]
    assert auth["peer_email"] == [sans[5]]
    assert got["peer_identity_key"] == "x509_subject_alternative_name"
    assert got["peer_identities"] == sans


def test_mutual_tls_client_chain(pki):
    # A client certificate signed by an intermediate, sent with it: grpcio
    # adds what followed the certificate as x509_pem_cert_chain, before
    # security_level (ours had no such key).
    intermediate = issue(pki.ca, name("pygrpc-native test intermediate"), is_ca=True)
    client = issue(intermediate, name("chained-client"), client=True)
    ref, ours = (observe(kind, pki, client, roots=pki.ca.cert, require=True) for kind in KINDS)
    assert list(ours["auth_context"].items()) == list(ref["auth_context"].items())
    assert ref["auth_context"]["x509_pem_cert_chain"] == [intermediate.cert]
    keys = list(ref["auth_context"])
    assert keys.index("x509_pem_cert_chain") == keys.index("security_level") - 1


def test_mutual_tls_common_name_identity(pki):
    got = same(pki, pki.client_cn_only, roots=pki.ca.cert, require=True)
    assert got["peer_identity_key"] == "x509_common_name"
    assert got["peer_identities"] == [b"cn-only-client"]


def _client_certs(pki):
    """Client certificates whose identities both servers must report alike."""
    uri = x509.UniformResourceIdentifier
    return {
        "empty subject": dict(subject=x509.Name([])),
        "no common name": dict(subject=x509.Name([A(NameOID.ORGANIZATION_NAME, "Org")])),
        "no common name, a SAN": dict(
            subject=x509.Name([A(NameOID.ORGANIZATION_NAME, "Org")]), sans=[x509.DNSName("a.example")]
        ),
        "non-ASCII": dict(subject=x509.Name([A(NameOID.COMMON_NAME, "Zoë Ünïcødé 日本 𝄞")])),
        "BMPString": dict(
            subject=x509.Name([A(NameOID.COMMON_NAME, "bmp ë", _type=x509.name._ASN1Type.BMPString)])
        ),
        "escapes": dict(subject=x509.Name([A(NameOID.COMMON_NAME, ' #lead, a+b "q" <x>;y=z\\ trail ')])),
        "leading hash": dict(subject=x509.Name([A(NameOID.COMMON_NAME, "#hash")])),
        "control characters": dict(subject=x509.Name([A(NameOID.COMMON_NAME, "tab\there\x01\x7f")])),
        "multi-valued RDN": dict(
            subject=x509.Name(
                [
                    x509.RelativeDistinguishedName(
                        [A(NameOID.ORGANIZATIONAL_UNIT_NAME, "b"), A(NameOID.COMMON_NAME, "a"), A(NameOID.USER_ID, "u")]
                    ),
                    x509.RelativeDistinguishedName([A(NameOID.COUNTRY_NAME, "US")]),
                ]
            )
        ),
        "common attributes": dict(
            subject=x509.Name(
                [
                    A(NameOID.DOMAIN_COMPONENT, "com"),
                    A(NameOID.DOMAIN_COMPONENT, "example"),
                    A(NameOID.EMAIL_ADDRESS, "me@example.com"),
                    A(NameOID.USER_ID, "uid1"),
                    A(NameOID.SERIAL_NUMBER, "1234"),
                    A(NameOID.STREET_ADDRESS, "1 Main St"),
                    A(NameOID.POSTAL_CODE, "94000"),
                    A(NameOID.SURNAME, "Doe"),
                    A(NameOID.GIVEN_NAME, "John"),
                    A(NameOID.TITLE, "Dr"),
                    A(NameOID.PSEUDONYM, "ps"),
                    A(NameOID.BUSINESS_CATEGORY, "bc"),
                    A(NameOID.JURISDICTION_COUNTRY_NAME, "US"),
                    A(ObjectIdentifier("2.5.4.97"), "orgid"),
                    A(ObjectIdentifier("1.2.3.4.5"), "unknown"),
                    A(NameOID.UNSTRUCTURED_NAME, "un"),
                    A(NameOID.COMMON_NAME, "first"),
                    A(NameOID.COMMON_NAME, "second"),
                ]
            )
        ),
        "one URI, not SPIFFE": dict(sans=[uri("spiffe://a")]),
        "one URI, SPIFFE with a query": dict(sans=[uri("spiffe://a/b?x")]),
        "two URIs": dict(sans=[uri("spiffe://a/b"), uri("https://x")]),
        "IPv6 forms": dict(
            sans=[
                x509.IPAddress(ipaddress.ip_address(a))
                for a in ("::ffff:1.2.3.4", "2001:db8:0:0:1:0:0:1", "::1.2.3.4", "2001:db8::", "::1")
            ]
        ),
        "other SAN kinds": dict(
            sans=[
                x509.DirectoryName(name("dir")),
                x509.RegisteredID(ObjectIdentifier("1.2.3")),
                x509.OtherName(ObjectIdentifier("1.2.3.4"), b"\x0c\x01a"),
                x509.DNSName("d.example"),
            ]
        ),
        "only a directory name SAN": dict(sans=[x509.DirectoryName(name("dir"))]),
        "marked as a CA": dict(is_ca=True),
        "no extended key usage": dict(client=False),
        "RSA key": dict(key_kind="rsa"),
    }


CLIENT_CASES = list(_client_certs(None))


@pytest.mark.parametrize("case", CLIENT_CASES)
def test_mutual_tls_identity_formats(pki, case):
    spec = dict(_client_certs(pki)[case])
    subject = spec.pop("subject", name("u"))
    spec.setdefault("client", True)
    client = issue(pki.ca, subject, **spec)
    got = same(pki, client, roots=pki.ca.cert, require=True)
    assert got["code"] == grpc.StatusCode.OK


@pytest.mark.parametrize(
    "case",
    [
        "no client certificate",
        "another CA",
        "server-only extended key usage",
        "any extended key usage",
        "any and server extended key usage",
    ],
)
def test_mutual_tls_refuses(pki, case):
    # The extended key usage must name client authentication on grpcio's
    # server (BoringSSL); Go's lets anyExtendedKeyUsage stand for it, and
    # ours served those two.
    any_usage = [ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE]
    client = {
        "no client certificate": None,
        "another CA": pki.other_client,
        "server-only extended key usage": issue(pki.ca, name("server-eku"), server=True),
        "any extended key usage": issue(pki.ca, name("any-eku"), other_usages=any_usage),
        "any and server extended key usage": issue(pki.ca, name("any-eku"), server=True, other_usages=any_usage),
    }[case]
    got = same(pki, client, roots=pki.ca.cert, require=True)
    # Refused as grpcio's server refuses: the connection closed, and no TLS
    # alert (Go's, which grpcio's clients logged as data corruption, read
    # "Unwrap failed (TSI_DATA_CORRUPTED)").
    assert got == {
        "code": grpc.StatusCode.UNAVAILABLE,
        "details": "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:<port>: Socket closed",
    }


@pytest.mark.parametrize("client", ["none", "client", "other_client"])
def test_roots_without_require_ask_for_no_certificate(pki, client):
    """grpcio's require_client_auth=False doesn't request a client
    certificate even with root certificates: any client is served, and no
    identity is reported."""
    got = same(pki, getattr(pki, client, None), roots=pki.ca.cert, require=False)
    assert got["code"] == grpc.StatusCode.OK
    assert got["peer_identity_key"] is None
    assert set(got["auth_context"]) == {
        "transport_security_type",
        "security_level",
        "ssl_session_reused",
        "ssl_tls_version",
        "ssl_negotiated_key_exchange_group",
    }


# -- TLS versions -----------------------------------------------------------------


def _handshake(port, pki, version, alpn=("h2",)):
    """A TLS handshake with Python's ssl at one version, then the HTTP/2
    preface: returns (version, ALPN, type of the server's first frame)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cadata=pki.ca.cert.decode())
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    ctx.minimum_version = ctx.maximum_version = version
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        with ctx.wrap_socket(sock, server_hostname="localhost") as tls:
            try:
                tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
                header = tls.recv(9)
            except ConnectionError:
                # The server closed the connection: newer Pythons report it
                # here instead of as an empty read. Either way, no frame.
                header = b""
            return tls.version(), tls.selected_alpn_protocol(), header[3:4]


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["1.2", "1.3"])
def test_tls_versions_accepted(pki, version):
    for kind in KINDS:
        with serving(kind, server_credentials(kind, pki)) as (port, _state):
            got = _handshake(port, pki, version)
        assert got == (version.name.replace("_", "."), "h2", b"\x04"), kind  # a SETTINGS frame


def test_client_without_alpn_gets_no_http2(pki):
    for kind in KINDS:
        with serving(kind, server_credentials(kind, pki)) as (port, _state):
            _version, alpn, frame = _handshake(port, pki, ssl.TLSVersion.TLSv1_3, alpn=())
        assert (alpn, frame) == (None, b""), kind


# -- request streams -----------------------------------------------------------------


def test_request_stream_sees_the_clients_certificate(pki):
    """A client-streaming call is served natively, so its handler sees the
    client's TLS identity exactly as a unary call on the same connection
    does (test_tls_streams.py compares both with grpcio)."""
    creds = pygrpc_native.ssl_server_credentials([(pki.server.key, pki.server.chain)], pki.ca.cert, True)
    with serving("native", creds) as (port, state):
        with grpc.secure_channel(f"127.0.0.1:{port}", channel_credentials(pki, pki.client)) as ch:
            assert ch.stream_unary(f"/{SERVICE}/Collect")(iter([b"a", b"b"]), timeout=CALL_TIMEOUT) == b"ab"
            ch.unary_unary(f"/{SERVICE}/Who")(b"", timeout=CALL_TIMEOUT)
        stream = state.wait_for("stream")
        native = state.wait_for("who")
    assert native["peer_identity_key"] == "x509_subject_alternative_name"
    assert native["auth_context"]["transport_security_type"] == [b"ssl"]
    for key in ("auth_context", "peer_identities", "peer_identity_key", "peer"):
        assert stream[key] == native[key], key


def test_go_is_stricter_about_client_certificates(pki):
    """Documented difference (docs/tls.md): Go's crypto/tls refuses client
    certificates that Go's x509 parser can't read, such as a name attribute
    in a VisibleString, which grpcio accepts."""
    subject = x509.Name([A(NameOID.COMMON_NAME, "ab", _type=x509.name._ASN1Type.VisibleString)])
    client = issue(pki.ca, subject, client=True)
    assert observe("grpcio", pki, client, roots=pki.ca.cert, require=True)["code"] == grpc.StatusCode.OK
    assert observe("native", pki, client, roots=pki.ca.cert, require=True)["code"] == grpc.StatusCode.UNAVAILABLE
