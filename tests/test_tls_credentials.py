"""pygrpc_native.ssl_server_credentials(): checked when made, and what
add_secure_port() accepts.

Certificates are made at test time (tls_certs.py).
"""

import inspect
from concurrent import futures

import grpc
import pytest
from cryptography.hazmat.primitives import serialization

import pygrpc_native
from tls_certs import make_ca, make_pki

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def pki():
    return make_pki()


def _pem_block(kind, body=b"AAAA"):
    return b"-----BEGIN %s-----\n%s\n-----END %s-----\n" % (kind, body, kind)


def test_signature_is_grpcios():
    ours = inspect.signature(pygrpc_native.ssl_server_credentials)
    theirs = inspect.signature(grpc.ssl_server_credentials)
    assert list(ours.parameters) == list(theirs.parameters)
    assert [p.default for p in ours.parameters.values()] == [p.default for p in theirs.parameters.values()]


def test_credentials_are_grpc_server_credentials(pki):
    creds = pygrpc_native.ssl_server_credentials([(pki.server.key, pki.server.chain)], pki.ca.cert, True)
    assert isinstance(creds, pygrpc_native.ServerCredentials)
    assert isinstance(creds, grpc.ServerCredentials)
    assert creds.require_client_auth is True
    # A list pair, a tuple of pairs, and grpcio's defaults work too.
    pygrpc_native.ssl_server_credentials(([pki.server.key, pki.server.chain],))
    pygrpc_native.ssl_server_credentials([(pki.server.key, pki.server.chain)], root_certificates=pki.ca.cert)


@pytest.mark.parametrize(
    "args",
    [
        ([],),
        (None,),
        ([("k", "c")], None, True),  # require_client_auth without roots comes first, as in grpcio
    ],
    ids=["no pairs", "None", "require without roots"],
)
def test_grpcios_own_errors(args):
    with pytest.raises(ValueError) as theirs:
        grpc.ssl_server_credentials(*args)
    with pytest.raises(ValueError) as ours:
        pygrpc_native.ssl_server_credentials(*args)
    assert str(ours.value) == str(theirs.value)


def _bad_credentials(pki):
    other = make_ca("unrelated")
    corrupt_cert = _pem_block(b"CERTIFICATE", b"bm90IERFUg==")
    return {
        "garbage key": (([(b"junk", pki.server.chain)],), "private key holds no PEM private key"),
        "corrupt key": (([(_pem_block(b"PRIVATE KEY"), pki.server.chain)],), "private key cannot be read"),
        "encrypted key": (([(_encrypted(pki.server.key), pki.server.chain)],), "private key is encrypted"),
        "key of another certificate": (([(other.key, pki.server.chain)],), "does not match the first certificate"),
        "garbage chain": (([(pki.server.key, b"junk")],), "certificate chain holds no PEM certificate"),
        "empty chain": (([(pki.server.key, b"")],), "certificate chain holds no PEM certificate"),
        "corrupt chain": (([(pki.server.key, corrupt_cert)],), "certificate chain: certificate 1 cannot be read"),
        "garbage roots": (([(pki.server.key, pki.server.chain)], b"junk", True), "root_certificates holds no PEM"),
        "empty roots": (([(pki.server.key, pki.server.chain)], b"", False), "root_certificates holds no PEM"),
        "corrupt roots": (
            ([(pki.server.key, pki.server.chain)], pki.ca.cert + corrupt_cert, True),
            "root_certificates: certificate 2 cannot be read",
        ),
    }


def _encrypted(key_pem):
    key = serialization.load_pem_private_key(key_pem, None)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )


@pytest.mark.parametrize(
    "case",
    [
        "garbage key",
        "corrupt key",
        "encrypted key",
        "key of another certificate",
        "garbage chain",
        "empty chain",
        "corrupt chain",
        "garbage roots",
        "empty roots",
        "corrupt roots",
    ],
)
def test_bad_pem_is_refused_when_made(pki, case):
    args, message = _bad_credentials(pki)[case]
    with pytest.raises(ValueError, match=message):
        pygrpc_native.ssl_server_credentials(*args)


@pytest.mark.parametrize(
    "args, message",
    [
        (([("key", b"chain")],), "the private key must be PEM-encoded bytes, not str"),
        (([(b"key", "chain")],), "the certificate chain must be PEM-encoded bytes, not str"),
        # root certificates may be str, as grpcio takes them
        (([(b"key", b"chain")], bytearray(b"roots")), "root_certificates must be PEM-encoded bytes, not bytearray"),
        (([b"key"],), "must hold \\(private_key, certificate_chain\\) pairs"),
    ],
)
def test_pem_must_be_bytes(args, message):
    with pytest.raises(TypeError, match=message):
        pygrpc_native.ssl_server_credentials(*args)


@pytest.mark.parametrize("key_format", ["pkcs8", "traditional"])
@pytest.mark.parametrize("key_kind", ["ec", "rsa"])
def test_key_formats(key_kind, key_format):
    pki = make_pki(key_kind)
    key = serialization.load_pem_private_key(pki.server.key, None)
    fmt = serialization.PrivateFormat.PKCS8 if key_format == "pkcs8" else serialization.PrivateFormat.TraditionalOpenSSL
    pem = key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())
    # Text around the PEM blocks (as openssl writes it) is ignored.
    pygrpc_native.ssl_server_credentials([(b"comment\n" + pem, b"subject=CN=localhost\n" + pki.server.chain)])


def test_unreadable_grpcio_credentials_are_a_clear_type_error(pki):
    # grpcio's factory as it was before pygrpc_native wrapped it: what a
    # name imported from grpc before pygrpc_native calls.
    grpcio_creds = grpc.ssl_server_credentials.__wrapped__([(pki.server.key, pki.server.chain)])
    server = pygrpc_native.server(futures.ThreadPoolExecutor(1))
    try:
        with pytest.raises(TypeError, match=r"made after pygrpc_native was imported.*pygrpc_native\.ssl_server_credentials\(\)"):
            server.add_secure_port("127.0.0.1:0", grpcio_creds)
        with pytest.raises(TypeError, match=r"needs server credentials"):
            server.add_secure_port("127.0.0.1:0", object())
        # Nothing was bound: the server can still take its port.
        assert server.add_insecure_port("127.0.0.1:0") > 0
    finally:
        server.stop(None)
    with pytest.raises(TypeError, match=r"pygrpc_native\.ssl_server_credentials\(\)"):
        pygrpc_native.NativeGrpcFront("127.0.0.1:0", [], credentials=grpcio_creds)


def test_our_credentials_work_with_grpc_server_too(pki):
    creds = pygrpc_native.ssl_server_credentials([(pki.server.key, pki.server.chain)])
    server = grpc.server(futures.ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("t.T", {"M": grpc.unary_unary_rpc_method_handler(lambda r, c: r)}),)
    )
    port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    try:
        with grpc.secure_channel(f"127.0.0.1:{port}", grpc.ssl_channel_credentials(pki.ca.cert)) as ch:
            assert ch.unary_unary("/t.T/M")(b"x", timeout=5) == b"x"
    finally:
        server.stop(None)


def test_failed_secure_bind_leaves_the_server_plaintext(pki):
    """A secure port that can't be bound doesn't leave TLS behind for the
    insecure port added next."""
    creds = pygrpc_native.ssl_server_credentials([(pki.server.key, pki.server.chain)])
    server = pygrpc_native.server(futures.ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("t.T", {"M": grpc.unary_unary_rpc_method_handler(lambda r, c: r)}),)
    )
    try:
        with pytest.raises(RuntimeError, match="Failed to bind"):
            server.add_secure_port("not an address", creds)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            assert ch.unary_unary("/t.T/M")(b"x", timeout=5) == b"x"
    finally:
        server.stop(None)
