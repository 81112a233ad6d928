"""Certificate rotation without a restart.

grpc.dynamic_ssl_server_credentials() is compared with grpcio's servers
(sync and aio): the certificate each new TLS handshake presents (read from
the handshake itself) before and after the fetcher returns a new
configuration, a fetcher returning None, and one that raises. Rotation
from files (pygrpc_native.ssl_server_credentials_from_files) and the
low-level API's update_credentials() are pygrpc_native's own.
"""

import gc
import ipaddress
import logging
import os
import time
import weakref
from concurrent import futures

import grpc
import pytest
from cryptography import x509
from grpc.experimental import session_cache

import pygrpc_native
from tls_certs import issue, make_pki, name
from tls_serving import call, presented, serving

pytestmark = pytest.mark.timeout(60)

FLAVOURS = ("sync", "aio")


@pytest.fixture(scope="module")
def pki():
    return make_pki()


@pytest.fixture(scope="module")
def renewed(pki):
    """A second server certificate from the same CA."""
    sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    return issue(pki.ca, name("renewed"), sans=sans, server=True)


class Fetcher:
    """Returns the configuration it is told to (None: keep), or raises;
    counts its calls."""

    def __init__(self):
        self.next = None
        self.error = None
        self.calls = 0

    def __call__(self):
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.next


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_fetcher_rotates_the_certificate_of_new_handshakes(pki, renewed, flavour):
    def scenario(kind):
        fetcher = Fetcher()
        initial = grpc.ssl_server_certificate_configuration([(pki.server.key, pki.server.chain)])
        creds = grpc.dynamic_ssl_server_credentials(initial, fetcher)
        seen = []
        with serving(kind, flavour, [("127.0.0.1:0", creds)]) as served:
            port = served.ports[0]
            seen.append(presented(port))  # the fetcher returns None: initial
            fetcher.next = grpc.ssl_server_certificate_configuration([(renewed.key, renewed.chain)])
            seen.append(presented(port))
            fetcher.next = None  # keeps the renewed one
            seen.append(presented(port))
            seen.append(call(f"127.0.0.1:{port}", grpc.ssl_channel_credentials(pki.ca.cert)))
        return seen, fetcher.calls

    got = {kind: scenario(kind) for kind in ("grpcio", "native")}
    assert got["native"] == got["grpcio"]
    assert got["native"][0] == ["CN=localhost", "CN=renewed", "CN=renewed", grpc.StatusCode.OK]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_raising_fetcher_keeps_the_current_certificate(pki, flavour, caplog):
    def scenario(kind):
        fetcher = Fetcher()
        fetcher.error = RuntimeError("vault unreachable")
        initial = grpc.ssl_server_certificate_configuration([(pki.server.key, pki.server.chain)])
        creds = grpc.dynamic_ssl_server_credentials(initial, fetcher)
        with serving(kind, flavour, [("127.0.0.1:0", creds)]) as served:
            port = served.ports[0]
            return presented(port), call(f"127.0.0.1:{port}", grpc.ssl_channel_credentials(pki.ca.cert))

    with caplog.at_level(logging.ERROR, logger="pygrpc_native"):
        got = {kind: scenario(kind) for kind in ("grpcio", "native")}
    assert got["native"] == got["grpcio"] == ("CN=localhost", grpc.StatusCode.OK)
    assert "vault unreachable" in caplog.text


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_configurations_made_as_grpcio_takes_them_rotate(pki, renewed, flavour):
    """Pairs from a generator and roots as str, in the initial
    configuration and in the one the fetcher returns."""

    def scenario(kind):
        fetcher = Fetcher()
        initial = grpc.ssl_server_certificate_configuration(
            ((k, c) for k, c in [(pki.server.key, pki.server.chain)]), pki.ca.cert.decode()
        )
        creds = grpc.dynamic_ssl_server_credentials(initial, fetcher)
        with serving(kind, flavour, [("127.0.0.1:0", creds)]) as served:
            port = served.ports[0]
            seen = [presented(port)]
            fetcher.next = grpc.ssl_server_certificate_configuration(
                map(tuple, [[renewed.key, renewed.chain]]), root_certificates=pki.ca.cert.decode()
            )
            seen.append(presented(port))
            return seen

    got = {kind: scenario(kind) for kind in ("grpcio", "native")}
    assert got["native"] == got["grpcio"] == ["CN=localhost", "CN=renewed"]


def test_a_fetcher_lives_as_long_as_its_credentials_or_a_server_serving_them(pki, renewed):
    """grpcio drops a fetcher with its credentials; a server keeps the
    credentials it serves (and so its fetcher) even when the caller drops
    them."""

    dropped = []
    for _ in range(20):
        fetcher = Fetcher()
        dropped.append(weakref.ref(fetcher))
        initial = grpc.ssl_server_certificate_configuration([(pki.server.key, pki.server.chain)])
        grpc.dynamic_ssl_server_credentials(initial, fetcher)
        del fetcher
    gc.collect()
    assert [r for r in dropped if r() is not None] == []

    fetcher = Fetcher()
    initial = grpc.ssl_server_certificate_configuration([(pki.server.key, pki.server.chain)])
    server = pygrpc_native.server(futures.ThreadPoolExecutor(2))
    port = server.add_secure_port("127.0.0.1:0", grpc.dynamic_ssl_server_credentials(initial, fetcher))
    server.start()
    try:
        gc.collect()  # the credentials object is the server's only
        fetcher.next = grpc.ssl_server_certificate_configuration([(renewed.key, renewed.chain)])
        assert presented(port) == "CN=renewed"
    finally:
        server.stop(None)


def test_mutual_tls_requirement_stays_across_rotation(pki, renewed):
    def scenario(kind):
        fetcher = Fetcher()
        initial = grpc.ssl_server_certificate_configuration([(pki.server.key, pki.server.chain)], pki.ca.cert)
        creds = grpc.dynamic_ssl_server_credentials(initial, fetcher, require_client_authentication=True)
        fetcher.next = grpc.ssl_server_certificate_configuration([(renewed.key, renewed.chain)], pki.ca.cert)
        with serving(kind, "sync", [("127.0.0.1:0", creds)]) as served:
            target = f"127.0.0.1:{served.ports[0]}"
            with_cert = grpc.ssl_channel_credentials(pki.ca.cert, pki.client.key, pki.client.chain)
            return (
                call(target, grpc.ssl_channel_credentials(pki.ca.cert)),
                call(target, with_cert),
                served.seen[0]["peer_identity_key"],
            )

    got = {kind: scenario(kind) for kind in ("grpcio", "native")}
    assert got["native"] == got["grpcio"]
    assert got["native"][:2] == (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.OK)


def _secret_dir(root, generation, key, chain):
    """Writes key and chain as Kubernetes mounts a secret: in a directory
    of their own, reached through the ..data symlink, which is swapped
    atomically to a new directory on update."""
    gen = root / f"..{generation}"
    gen.mkdir()
    (gen / "tls.key").write_bytes(key)
    (gen / "tls.crt").write_bytes(chain)
    tmp = root / "..data_tmp"
    os.symlink(gen.name, tmp)
    os.replace(tmp, root / "..data")
    for f in ("tls.key", "tls.crt"):
        if not (root / f).is_symlink():
            os.symlink(f"..data/{f}", root / f)


def _eventually(read, want, timeout=5.0):
    deadline = time.monotonic() + timeout
    while True:
        got = read()
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_files_rotate_on_symlink_swap_and_mismatches_keep_the_current(pki, renewed, tmp_path, capfd):
    _secret_dir(tmp_path, "1", pki.server.key, pki.server.chain)
    creds = pygrpc_native.ssl_server_credentials_from_files(str(tmp_path / "tls.key"), str(tmp_path / "tls.crt"))
    with serving("native", "sync", [("127.0.0.1:0", creds)]) as served:
        port = served.ports[0]
        assert presented(port) == "CN=localhost"
        _secret_dir(tmp_path, "2", renewed.key, renewed.chain)
        assert _eventually(lambda: presented(port), "CN=renewed") == "CN=renewed"
        # A key that doesn't match its certificate: logged, the renewed
        # certificate stays.
        _secret_dir(tmp_path, "3", pki.server.key, renewed.chain)
        time.sleep(1.2)
        assert presented(port) == "CN=renewed"
        assert presented(port) == "CN=renewed"
        assert call(f"127.0.0.1:{port}", grpc.ssl_channel_credentials(pki.ca.cert)) == grpc.StatusCode.OK
    assert "does not match" in capfd.readouterr().err


def test_file_credentials_serve_their_first_configuration_on_grpc_server(pki, renewed, tmp_path):
    _secret_dir(tmp_path, "1", pki.server.key, pki.server.chain)
    creds = pygrpc_native.ssl_server_credentials_from_files(str(tmp_path / "tls.key"), str(tmp_path / "tls.crt"))
    with serving("grpcio", "sync", [("127.0.0.1:0", creds)]) as served:
        _secret_dir(tmp_path, "2", renewed.key, renewed.chain)
        time.sleep(1.2)
        assert presented(served.ports[0]) == "CN=localhost"


def test_file_credentials_are_checked_when_made(tmp_path, pki):
    with pytest.raises(ValueError, match="cannot read the private key"):
        pygrpc_native.ssl_server_credentials_from_files(str(tmp_path / "missing.key"), str(tmp_path / "missing.crt"))
    (tmp_path / "k").write_bytes(make_pki().server.key)
    (tmp_path / "c").write_bytes(pki.server.chain)
    with pytest.raises(ValueError, match="does not match"):
        pygrpc_native.ssl_server_credentials_from_files(str(tmp_path / "k"), str(tmp_path / "c"))


def test_low_level_front_swaps_its_credentials(pki, renewed):
    creds = grpc.ssl_server_credentials([(pki.server.key, pki.server.chain)])
    front = pygrpc_native.NativeGrpcFront("127.0.0.1:0", [], credentials=creds)
    front.start()
    try:
        assert presented(front.port) == "CN=localhost"
        front.update_credentials(grpc.ssl_server_certificate_configuration([(renewed.key, renewed.chain)]))
        assert presented(front.port) == "CN=renewed"
        with pytest.raises(ValueError, match="does not match"):
            front.update_credentials(grpc.ssl_server_certificate_configuration([(pki.server.key, renewed.chain)]))
        assert presented(front.port) == "CN=renewed"
        with pytest.raises(TypeError, match="update_credentials"):
            front.update_credentials(object())
    finally:
        front.stop(0)
    plain = pygrpc_native.NativeGrpcFront("127.0.0.1:0", [])
    try:
        with pytest.raises(ValueError, match="no port of this front serves TLS"):
            plain.update_credentials(pygrpc_native.ssl_server_credentials([(renewed.key, renewed.chain)]))
    finally:
        plain.stop(0)


def test_thread_pool_is_not_needed_for_fetching(pki, renewed):
    # The fetcher runs on pygrpc_native's own thread, not the server's pool:
    # a server whose pool is busy still rotates.
    pool = futures.ThreadPoolExecutor(1)
    pool.submit(time.sleep, 1.0)
    fetcher = Fetcher()
    fetcher.next = grpc.ssl_server_certificate_configuration([(renewed.key, renewed.chain)])
    creds = grpc.dynamic_ssl_server_credentials(
        grpc.ssl_server_certificate_configuration([(pki.server.key, pki.server.chain)]), fetcher
    )
    server = pygrpc_native.server(pool)
    port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    try:
        assert presented(port) == "CN=renewed"
    finally:
        server.stop(None).wait(5)
        pool.shutdown(wait=False)


def test_existing_connections_keep_their_certificate_and_ask_no_fetcher(pki, renewed):
    """As grpcio's _server_ssl_cert_config_test: after a rotation, a channel
    connected before it still works, and its calls don't run the fetcher."""

    def scenario(kind):
        fetcher = Fetcher()
        initial = grpc.ssl_server_certificate_configuration([(pki.server.key, pki.server.chain)])
        creds = grpc.dynamic_ssl_server_credentials(initial, fetcher)
        with serving(kind, "sync", [("127.0.0.1:0", creds)]) as served:
            target = f"127.0.0.1:{served.ports[0]}"
            with grpc.secure_channel(target, grpc.ssl_channel_credentials(pki.ca.cert)) as channel:
                who = channel.unary_unary("/tls.Creds/Who")
                who(b"before", timeout=5)
                calls_before = fetcher.calls
                fetcher.next = grpc.ssl_server_certificate_configuration([(renewed.key, renewed.chain)])
                rotated_to = presented(served.ports[0])
                calls_after_rotation = fetcher.calls
                who(b"after", timeout=5)
                return calls_before, rotated_to, fetcher.calls - calls_after_rotation

    got = {kind: scenario(kind) for kind in ("grpcio", "native")}
    assert got["native"] == got["grpcio"] == (1, "CN=renewed", 0)


def test_a_rotation_ends_resumption_of_earlier_sessions(pki, renewed):
    """After the fetcher rotates, a client's cached session is not resumed:
    it verifies the new certificate in a full handshake, as with grpcio."""

    def scenario(kind):
        fetcher = Fetcher()
        initial = grpc.ssl_server_certificate_configuration([(pki.server.key, pki.server.chain)])
        creds = grpc.dynamic_ssl_server_credentials(initial, fetcher)
        options = [("grpc.ssl_session_cache", session_cache.ssl_session_cache_lru(4))]
        reused = []
        with serving(kind, "sync", [("localhost:0", creds)]) as served:
            for step in range(4):
                fetcher.next = renewed_config if step == 2 else None
                call(f"localhost:{served.ports[0]}", grpc.ssl_channel_credentials(pki.ca.cert), options)
                reused.append(served.seen[-1]["auth_context"]["ssl_session_reused"])
        return reused

    renewed_config = grpc.ssl_server_certificate_configuration([(renewed.key, renewed.chain)])
    got = {kind: scenario(kind) for kind in ("grpcio", "native")}
    assert got["native"] == got["grpcio"] == [[b"false"], [b"true"], [b"false"], [b"true"]]
