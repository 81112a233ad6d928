"""grpcio's own server credentials on pygrpc_native's servers, compared
with grpcio's servers (sync and aio) for the same credentials and clients.

A grpcio TLS user changes only the line that creates the server: the
credentials of grpc.ssl_server_credentials(), grpc.local_server_credentials()
and grpc.dynamic_ssl_server_credentials() (test_tls_rotation.py) are served
as grpcio serves them, auth_context() included. Credentials pygrpc_native
can't read are a TypeError that says why.
"""

import asyncio
import ipaddress
import logging
import socket
import subprocess
import sys
from concurrent import futures

import grpc
import pytest
from cryptography import x509
from grpc.experimental import session_cache

import pygrpc_native
import pygrpc_native.aio
from tls_certs import issue, make_pki, name
from tls_serving import call, presented, serving

pytestmark = pytest.mark.timeout(60)

FLAVOURS = ("sync", "aio")


@pytest.fixture(scope="module")
def pki():
    return make_pki()


def observe(kind, flavour, creds, channel_credentials, target_host="127.0.0.1", address="127.0.0.1:0"):
    with serving(kind, flavour, [(address, creds)]) as served:
        target = address if address.startswith("unix:") else f"{target_host}:{served.ports[0]}"
        code = call(target, channel_credentials)
        return {"code": code, "seen": served.seen}


CASES = {
    # name: (server credentials, client credentials, expected code)
    "server auth": (
        lambda p: grpc.ssl_server_credentials([(p.server.key, p.server.chain)]),
        lambda p: grpc.ssl_channel_credentials(p.ca.cert),
        grpc.StatusCode.OK,
    ),
    "mutual, required": (
        lambda p: grpc.ssl_server_credentials([(p.server.key, p.server.chain)], p.ca.cert, True),
        lambda p: grpc.ssl_channel_credentials(p.ca.cert, p.client.key, p.client.chain),
        grpc.StatusCode.OK,
    ),
    "mutual, required, no client certificate": (
        lambda p: grpc.ssl_server_credentials([(p.server.key, p.server.chain)], p.ca.cert, True),
        lambda p: grpc.ssl_channel_credentials(p.ca.cert),
        grpc.StatusCode.UNAVAILABLE,
    ),
    "mutual, required, certificate of another CA": (
        lambda p: grpc.ssl_server_credentials([(p.server.key, p.server.chain)], p.ca.cert, True),
        lambda p: grpc.ssl_channel_credentials(p.ca.cert, p.other_client.key, p.other_client.chain),
        grpc.StatusCode.UNAVAILABLE,
    ),
    "roots, not required": (
        lambda p: grpc.ssl_server_credentials([(p.server.key, p.server.chain)], p.ca.cert, False),
        lambda p: grpc.ssl_channel_credentials(p.ca.cert, p.client.key, p.client.chain),
        grpc.StatusCode.OK,
    ),
    # As grpcio takes them: roots as str, pairs from an iterator (read
    # once, by grpcio's factory and by pygrpc_native).
    "mutual, roots as str": (
        lambda p: grpc.ssl_server_credentials([(p.server.key, p.server.chain)], p.ca.cert.decode(), True),
        lambda p: grpc.ssl_channel_credentials(p.ca.cert, p.client.key, p.client.chain),
        grpc.StatusCode.OK,
    ),
    "pairs from an iterator": (
        lambda p: grpc.ssl_server_credentials(zip([p.server.key], [p.server.chain])),
        lambda p: grpc.ssl_channel_credentials(p.ca.cert),
        grpc.StatusCode.OK,
    ),
    "a pair that is an iterator": (
        lambda p: grpc.ssl_server_credentials([iter((p.server.key, p.server.chain))]),
        lambda p: grpc.ssl_channel_credentials(p.ca.cert),
        grpc.StatusCode.OK,
    ),
    "local tcp": (
        lambda p: grpc.local_server_credentials(grpc.LocalConnectionType.LOCAL_TCP),
        lambda p: grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP),
        grpc.StatusCode.OK,
    ),
}


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_credentials_of_grpcio_served_as_grpcio(pki, case, flavour):
    make_creds, make_channel, code = CASES[case]
    got = {
        kind: observe(kind, flavour, make_creds(pki), make_channel(pki)) for kind in ("grpcio", "native")
    }
    assert got["native"] == got["grpcio"]
    assert got["native"]["code"] == code


def test_client_names_with_a_nul_end_there(pki):
    """grpc-core keeps a certificate's names as C strings: the client's
    identity is cut at a NUL byte, as an allow-list check sees it (ours
    kept the whole name); x509_subject keeps it, escaped."""
    client = issue(
        pki.ca,
        name("a\x00b"),
        sans=[x509.DNSName("c\x00d.test"), x509.RFC822Name("e\x00f@x.test")],
        client=True,
    )
    got = {
        kind: observe(
            kind,
            "sync",
            grpc.ssl_server_credentials([(pki.server.key, pki.server.chain)], pki.ca.cert, True),
            grpc.ssl_channel_credentials(pki.ca.cert, client.key, client.chain),
        )
        for kind in ("grpcio", "native")
    }
    assert got["native"] == got["grpcio"]
    seen = got["native"]["seen"][0]
    assert seen["auth_context"]["x509_common_name"] == [b"a"]
    assert seen["peer_identities"] == [b"c", b"e"]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_local_uds(pki, flavour, tmp_path):
    got = {}
    for kind in ("grpcio", "native"):
        address = f"unix:{tmp_path}/{kind}.sock"
        got[kind] = observe(
            kind,
            flavour,
            grpc.local_server_credentials(grpc.LocalConnectionType.UDS),
            grpc.local_channel_credentials(grpc.LocalConnectionType.UDS),
            address=address,
        )
    assert got["native"] == got["grpcio"]
    assert got["native"]["seen"][0]["auth_context"] == {
        "transport_security_type": [b"local"],
        "security_level": [b"TSI_PRIVACY_AND_INTEGRITY"],
    }


def _own_address():
    """This machine's non-loopback IPv4 address, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if ipaddress.ip_address(address).is_loopback else address


@pytest.mark.parametrize("other", ["127.0.0.2", "own address"])
def test_local_tcp_serves_connections_to_127_0_0_1_only(other):
    """grpc-core checks the address a connection arrived at: 127.0.0.1 (or
    ::1), not the rest of 127/8 (whose peer is 127.0.0.1 all the same) nor
    the machine's own address."""
    host = _own_address() if other == "own address" else other
    if host is None:
        pytest.skip("no non-loopback address here; go/front's TestLocalCredentialsCheck covers the check")
    got = {}
    for kind in ("grpcio", "native"):
        creds = grpc.local_server_credentials(grpc.LocalConnectionType.LOCAL_TCP)
        with serving(kind, "sync", [("0.0.0.0:0", creds)]) as served:
            port = served.ports[0]
            # A local handshake is none at all, so a plaintext client shows
            # the server's check alone.
            got[kind] = (call(f"127.0.0.1:{port}"), call(f"{host}:{port}"))
    assert got["native"] == got["grpcio"] == (grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_session_resumption_and_ssl_keys(pki, flavour):
    def scenario(kind):
        creds = grpc.ssl_server_credentials([(pki.server.key, pki.server.chain)])
        cache = session_cache.ssl_session_cache_lru(4)
        options = [("grpc.ssl_session_cache", cache)]
        with serving(kind, flavour, [("localhost:0", creds)]) as served:
            target = f"localhost:{served.ports[0]}"
            codes = [call(target, grpc.ssl_channel_credentials(pki.ca.cert), options) for _ in range(2)]
            return codes, [seen["auth_context"] for seen in served.seen]

    got = {kind: scenario(kind) for kind in ("grpcio", "native")}
    assert got["native"] == got["grpcio"]
    codes, (first, second) = got["native"]
    assert codes == [grpc.StatusCode.OK] * 2
    assert first["ssl_session_reused"] == [b"false"] and second["ssl_session_reused"] == [b"true"]
    assert first["ssl_requested_server_name"] == [b"localhost"]
    assert list(first) == [
        "transport_security_type",
        "security_level",
        "ssl_session_reused",
        "ssl_requested_server_name",
        "ssl_tls_version",
        "ssl_negotiated_key_exchange_group",
    ]


def test_several_pairs_chosen_by_server_name(pki):
    other = issue(pki.ca, name("b.example"), sans=[x509.DNSName("b.example")], server=True)
    creds = grpc.ssl_server_credentials([(pki.server.key, pki.server.chain), (other.key, other.chain)])
    got = {}
    for kind in ("grpcio", "native"):
        with serving(kind, "sync", [("127.0.0.1:0", creds)]) as served:
            port = served.ports[0]
            got[kind] = {
                sni: presented(port, sni) for sni in ("localhost", "b.example", "unknown.example", None)
            }
            got[kind]["call"] = call(
                f"127.0.0.1:{port}",
                grpc.ssl_channel_credentials(pki.ca.cert),
                [("grpc.ssl_target_name_override", "b.example")],
            )
    assert got["native"] == got["grpcio"]
    assert got["native"]["b.example"] == "CN=b.example"
    assert got["native"]["localhost"] == got["native"][None] == "CN=localhost"


def test_several_pairs_and_a_certificate_named_by_its_common_name_only(pki):
    # A certificate without SANs is chosen by its common name, as grpcio
    # chooses it (Go's choice matches SANs only: ours presented the first
    # pair, and the client's name check failed).
    legacy = issue(pki.ca, name("cnonly.example"), server=True)
    creds = grpc.ssl_server_credentials([(pki.server.key, pki.server.chain), (legacy.key, legacy.chain)])
    got = {}
    for kind in ("grpcio", "native"):
        with serving(kind, "sync", [("127.0.0.1:0", creds)]) as served:
            port = served.ports[0]
            got[kind] = {sni: presented(port, sni) for sni in ("cnonly.example", "CNONLY.example", "localhost")}
            got[kind]["call"] = call(
                f"127.0.0.1:{port}",
                grpc.ssl_channel_credentials(pki.ca.cert),
                [("grpc.ssl_target_name_override", "cnonly.example")],
            )
    assert got["native"] == got["grpcio"]
    assert got["native"]["cnonly.example"] == "CN=cnonly.example"


# The second pair's certificate (its SANs and common name) and the name a
# client asks for: grpc-core's rules choose it or not, where Go's own
# (crypto/tls and x509.VerifyHostname) chose otherwise.
SNI_CASES = {
    "wildcard under a top-level name": ([x509.DNSName("*.localhost")], "wild", "api.localhost"),
    "wildcard common name": ([], "*.cnwild.test", "a.cnwild.test"),
    "SAN with a trailing dot": ([x509.DNSName("exact.test.")], "exact", "exact.test"),
    "wildcard SAN with a trailing dot": ([x509.DNSName("*.x.test.")], "wildx", "a.x.test"),
    "common name beside a URI SAN": ([x509.UniformResourceIdentifier("spiffe://x.test/a")], "urionly.test", "urionly.test"),
    "common name beside an email SAN": ([x509.RFC822Name("a@x.test")], "emailonly.test", "emailonly.test"),
}


@pytest.mark.parametrize("case", sorted(SNI_CASES))
def test_several_pairs_chosen_by_grpc_cores_name_rules(pki, case):
    sans, common_name, asked = SNI_CASES[case]
    second = issue(pki.ca, name(common_name), sans=sans, server=True)
    creds = grpc.ssl_server_credentials([(pki.server.key, pki.server.chain), (second.key, second.chain)])
    got = {}
    for kind in ("grpcio", "native"):
        with serving(kind, "sync", [("127.0.0.1:0", creds)]) as served:
            got[kind] = presented(served.ports[0], asked)
    assert got["native"] == got["grpcio"]


def test_several_ports_each_with_its_own_credentials(pki):
    other = make_pki()
    got = {}
    for kind in ("grpcio", "native"):
        ports = [
            ("127.0.0.1:0", grpc.ssl_server_credentials([(pki.server.key, pki.server.chain)])),
            ("127.0.0.1:0", grpc.ssl_server_credentials([(other.server.key, other.server.chain)], other.ca.cert, True)),
            ("127.0.0.1:0", None),
        ]
        with serving(kind, "sync", ports) as served:
            tls, mutual, plain = served.ports
            got[kind] = (
                call(f"127.0.0.1:{tls}", grpc.ssl_channel_credentials(pki.ca.cert)),
                call(
                    f"127.0.0.1:{mutual}",
                    grpc.ssl_channel_credentials(other.ca.cert, other.client.key, other.client.chain),
                ),
                call(f"127.0.0.1:{mutual}", grpc.ssl_channel_credentials(pki.ca.cert)),
                call(f"127.0.0.1:{plain}"),
                [sorted(s["auth_context"]["transport_security_type"]) for s in served.seen],
            )
    assert got["native"] == got["grpcio"]


def test_credentials_made_before_import_are_a_clear_error(pki):
    made_before = grpc.ssl_server_credentials.__wrapped__([(pki.server.key, pki.server.chain)])
    server = pygrpc_native.server(futures.ThreadPoolExecutor(1))
    try:
        with pytest.raises(TypeError, match="made after pygrpc_native was imported"):
            server.add_secure_port("127.0.0.1:0", made_before)
    finally:
        server.stop(None)


def test_xds_credentials_are_a_clear_error():
    creds = grpc.xds_server_credentials(grpc.insecure_server_credentials())
    server = pygrpc_native.server(futures.ThreadPoolExecutor(1))
    try:
        with pytest.raises(TypeError, match="xDS credentials need an xDS control plane"):
            server.add_secure_port("127.0.0.1:0", creds)
    finally:
        server.stop(None)
    with pytest.raises(ValueError, match="xds=True"):
        pygrpc_native.server(futures.ThreadPoolExecutor(1), xds=True)


def test_factories_still_make_grpcios_objects(pki):
    creds = grpc.ssl_server_credentials([(pki.server.key, pki.server.chain)])
    assert type(creds) is grpc.ServerCredentials
    assert grpc.ssl_server_credentials.__name__ == "ssl_server_credentials"
    with pytest.raises(ValueError):
        grpc.ssl_server_credentials([])  # grpcio's own error, as before
    with pytest.raises(TypeError):
        grpc.dynamic_ssl_server_credentials(None, str)  # grpcio's own check
    # Keyword arguments, by grpcio's names, are read as well.
    by_keyword = grpc.dynamic_ssl_server_credentials(
        initial_certificate_configuration=grpc.ssl_server_certificate_configuration(
            private_key_certificate_chain_pairs=[(pki.server.key, pki.server.chain)], root_certificates=pki.ca.cert
        ),
        certificate_configuration_fetcher=lambda: None,
        require_client_authentication=True,
    )
    with serving("native", "sync", [("127.0.0.1:0", by_keyword)]) as served:
        target = f"127.0.0.1:{served.ports[0]}"
        assert call(target, grpc.ssl_channel_credentials(pki.ca.cert)) == grpc.StatusCode.UNAVAILABLE
        with_cert = grpc.ssl_channel_credentials(pki.ca.cert, pki.client.key, pki.client.chain)
        assert call(target, with_cert) == grpc.StatusCode.OK


def test_unusable_key_material_is_refused_by_add_secure_port(pki):
    other = make_pki()
    creds = grpc.ssl_server_credentials([(other.server.key, pki.server.chain)])  # grpcio checks nothing here
    server = pygrpc_native.server(futures.ThreadPoolExecutor(1))
    try:
        with pytest.raises(RuntimeError, match="does not match"):
            server.add_secure_port("127.0.0.1:0", creds)
    finally:
        server.stop(None)


def test_errors_about_key_pairs_never_show_the_key(pki, caplog):
    """A pair given the wrong way is named by its type: the key's PEM
    appeared in the TypeError (and a fetcher's in the log at each
    handshake)."""
    for wrong in ((pki.server.key, pki.server.chain), [[pki.server.key]], [[pki.server.key, pki.server.chain, b""]]):
        with pytest.raises(TypeError) as err:
            pygrpc_native.ssl_server_credentials(wrong)
        assert "PRIVATE KEY" not in str(err.value) and "pairs" in str(err.value)

    initial = grpc.ssl_server_certificate_configuration([(pki.server.key, pki.server.chain)])
    creds = grpc.dynamic_ssl_server_credentials(initial, lambda: [(pki.server.key, pki.server.chain)])
    with caplog.at_level(logging.ERROR, logger="pygrpc_native"):
        with serving("native", "sync", [("127.0.0.1:0", creds)]) as served:
            assert presented(served.ports[0]) == "CN=localhost"
    assert "fetcher returned a list" in caplog.text and "PRIVATE KEY" not in caplog.text


def test_add_secure_port_without_credentials_binds_nothing():
    # grpcio fails on None too (AttributeError); ours used to bind a
    # plaintext port. Known difference: a TypeError that says what to do.
    with pytest.raises(AttributeError):
        grpc.server(futures.ThreadPoolExecutor(1)).add_secure_port("127.0.0.1:0", None)
    server = pygrpc_native.server(futures.ThreadPoolExecutor(1))
    try:
        with pytest.raises(TypeError, match="needs server credentials, got None"):
            server.add_secure_port("127.0.0.1:0", None)
    finally:
        server.stop(None)

    async def on_aio():
        server = pygrpc_native.aio.server()
        try:
            server.add_secure_port("127.0.0.1:0", None)
        finally:
            await server.stop(None)

    with pytest.raises(TypeError, match="needs server credentials, got None"):
        asyncio.run(on_aio())


def test_grpc_beta_alias_imported_first_is_rebound():
    # grpc.beta.implementations binds grpc's factory when it is imported;
    # imported before pygrpc_native, its alias still makes readable
    # credentials. Run in a fresh interpreter, where the order is ours.
    script = (
        "from grpc.beta import implementations\n"
        "import pygrpc_native, grpc\n"
        "assert implementations.ssl_server_credentials is grpc.ssl_server_credentials\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


def test_sessions_resume_only_on_the_server_that_issued_them(pki):
    """As grpcio's _session_cache_test: a session from one server is not
    resumed by another of the same name, nor by the same address served
    again after a restart."""

    def scenario(kind):
        cache = session_cache.ssl_session_cache_lru(1)
        options = [("grpc.ssl_session_cache", cache)]

        got = []
        creds = grpc.ssl_server_credentials([(pki.server.key, pki.server.chain)])
        with serving(kind, "sync", [("localhost:0", creds)]) as first:
            with serving(kind, "sync", [("localhost:0", creds)]) as second:
                for served in (first, first, second, second, first):
                    before = len(served.seen)
                    call(f"localhost:{served.ports[0]}", grpc.ssl_channel_credentials(pki.ca.cert), options)
                    got.append(served.seen[before]["auth_context"]["ssl_session_reused"])
        return got

    got = {kind: scenario(kind) for kind in ("grpcio", "native")}
    assert got["native"] == got["grpcio"] == [[b"false"], [b"true"], [b"false"], [b"true"], [b"false"]]


def test_insecure_server_credentials_make_a_plaintext_port():
    got = {}
    for kind in ("grpcio", "native"):
        with serving(kind, "sync", [("127.0.0.1:0", grpc.insecure_server_credentials())]) as served:
            got[kind] = (call(f"127.0.0.1:{served.ports[0]}"), served.seen[0]["auth_context"])
    assert got["native"] == got["grpcio"]
    assert got["native"][0] == grpc.StatusCode.OK


def test_alts_credentials_are_a_clear_error():
    server = pygrpc_native.server(futures.ThreadPoolExecutor(1))
    try:
        with pytest.raises(TypeError, match="ALTS handshaker service"):
            server.add_secure_port("127.0.0.1:0", grpc.alts_server_credentials())
    finally:
        server.stop(None)


def test_local_credentials_of_the_other_kind_refuse_connections(tmp_path):
    got = {}
    for kind in ("grpcio", "native"):
        uds = grpc.local_server_credentials(grpc.LocalConnectionType.UDS)
        tcp = grpc.local_server_credentials(grpc.LocalConnectionType.LOCAL_TCP)
        sock = f"unix:{tmp_path}/{kind}.sock"
        with serving(kind, "sync", [("127.0.0.1:0", uds), (sock, tcp)]) as served:
            got[kind] = (call(f"127.0.0.1:{served.ports[0]}"), call(sock))
    assert got["native"] == got["grpcio"] == (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE)
