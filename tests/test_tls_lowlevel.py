"""NativeGrpcFront(credentials=...): TLS on the low-level front, and the
client identity in call_details()."""

import inspect

import grpc
import pytest

import pygrpc_native
from pygrpc_native import EVENT_CALL
from lowlevel_helpers import SAY, say, serving, started_front
from tls_certs import make_pki

pytestmark = pytest.mark.timeout(60)

INSECURE = {"transport_security_type": [b"insecure"], "security_level": [b"TSI_SECURITY_NONE"]}


@pytest.fixture(scope="module")
def pki():
    return make_pki()


def _recording(seen):
    def handler(front, event):
        if event[0] == EVENT_CALL:
            seen.append(front.call_details(event[1]))
            front.respond(event[1], b"ok")

    return handler


def _secure_channel(port, pki, client=None):
    if client is None:
        creds = grpc.ssl_channel_credentials(pki.ca.cert)
    else:
        creds = grpc.ssl_channel_credentials(pki.ca.cert, client.key, client.chain)
    return grpc.secure_channel(f"127.0.0.1:{port}", creds, [("grpc.use_local_subchannel_pool", 1)])


def test_credentials_is_a_parameter_with_a_default_among_the_last():
    # New parameters are added at the end, with a default (health=... came after).
    params = list(inspect.signature(pygrpc_native.NativeGrpcFront).parameters.values())
    at = [p.name for p in params].index("credentials")
    assert params[at].default is None
    assert all(p.default is not inspect.Parameter.empty for p in params[at:])


def test_mutual_tls_identity_in_call_details(pki):
    creds = pygrpc_native.ssl_server_credentials([(pki.server.key, pki.server.chain)], pki.ca.cert, True)
    seen = []
    with serving(_recording(seen), credentials=creds) as s:
        with _secure_channel(s.port, pki, pki.client) as ch:
            assert say(ch)(b"x", timeout=5) == b"ok"
        with _secure_channel(s.port, pki) as ch, pytest.raises(grpc.RpcError) as err:
            say(ch)(b"x", timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    (details,) = seen
    auth = details["auth_context"]
    assert list(auth) == [
        "transport_security_type",
        "x509_subject",
        "x509_common_name",
        "x509_pem_cert",
        "x509_subject_alternative_name",
        "peer_dns",
        "peer_ip",
        "peer_uri",
        "peer_email",
        "security_level",
        "ssl_session_reused",
        "ssl_tls_version",
        "ssl_negotiated_key_exchange_group",
        "peer_spiffe_id",
    ]
    assert all(isinstance(v, list) and all(type(b) is bytes for b in v) for v in auth.values())
    assert auth["transport_security_type"] == [b"ssl"]
    assert auth["x509_common_name"] == [b"test-client"]
    assert auth["x509_pem_cert"] == [pki.client.cert]
    assert details["peer_identity_key"] == "x509_subject_alternative_name"
    assert details["peer"].startswith("ipv4:127.0.0.1:")


def test_server_auth_only(pki):
    creds = pygrpc_native.ssl_server_credentials([(pki.server.key, pki.server.chain)])
    seen = []
    with serving(_recording(seen), credentials=creds) as s:
        with _secure_channel(s.port, pki, pki.client) as ch:
            assert say(ch)(b"x", timeout=5) == b"ok"
        with s.channel() as plaintext, pytest.raises(grpc.RpcError) as err:
            say(plaintext)(b"x", timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    (details,) = seen
    assert details["auth_context"] == {
        "transport_security_type": [b"ssl"],
        "security_level": [b"TSI_PRIVACY_AND_INTEGRITY"],
        "ssl_session_reused": [b"false"],
        "ssl_tls_version": [b"TLSv1.3"],
        "ssl_negotiated_key_exchange_group": [b"X25519MLKEM768"],
    }
    assert details["peer_identity_key"] is None


def test_plaintext_call_details_are_insecure():
    seen = []
    with serving(_recording(seen)) as s, s.channel() as ch:
        assert say(ch)(b"x", timeout=5) == b"ok"
    assert seen[0]["auth_context"] == INSECURE
    assert seen[0]["peer_identity_key"] is None


def test_bad_credentials_fail_at_creation_not_at_start(pki):
    # Credentials are checked when made, so a front never gets bad ones;
    # anything else is a TypeError.
    with pytest.raises(TypeError, match="ssl_server_credentials"):
        pygrpc_native.NativeGrpcFront("127.0.0.1:0", [(SAY, False)], credentials=(pki.server.key, pki.server.chain))


def test_tls_cannot_change_once_started(pki):
    creds = pygrpc_native.ssl_server_credentials([(pki.server.key, pki.server.chain)])
    with started_front(credentials=creds) as front:
        with pytest.raises(RuntimeError, match="already started"):
            front._set_tls("null")


def test_local_credentials_on_a_unix_socket(tmp_path):
    seen = []
    address = f"unix:{tmp_path}/front.sock"
    creds = grpc.local_server_credentials(grpc.LocalConnectionType.UDS)
    with serving(_recording(seen), address=address, credentials=creds):
        channel_creds = grpc.local_channel_credentials(grpc.LocalConnectionType.UDS)
        with grpc.secure_channel(address, channel_creds) as ch:
            assert say(ch)(b"x", timeout=5) == b"ok"
    (details,) = seen
    assert details["auth_context"] == {
        "transport_security_type": [b"local"],
        "security_level": [b"TSI_PRIVACY_AND_INTEGRITY"],
    }
    assert details["peer_identity_key"] == "transport_security_type"
