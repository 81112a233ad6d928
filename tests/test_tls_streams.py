"""Mutual TLS in client-streaming and bidi handlers, on both kinds of
server (tests/diff/flavours.py): what a stream handler reads from its
context (auth_context(), peer_identities(), peer_identity_key(), peer())
is what grpcio's servers give it for the same certificates, as in unary
handlers (test_tls_server.py, test_tls_aio.py). grpcio's ssl_ keys are
left out, as there: pygrpc_native doesn't report them (docs/tls.md).
"""

import grpc
import pytest

import pygrpc_native
from diff import streams
from diff.flavours import each_flavour
from diff.harness import KINDS, method, peer_shape
from diff.streams import each_kind
from tls_certs import make_pki

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def pki():
    return make_pki()


async def _identity(requests, ctx, state):
    got = [r async for r in requests]
    state.record(
        "identity",
        {
            "auth_context": {k: v for k, v in ctx.auth_context().items() if not k.startswith("ssl_")},
            "peer_identities": ctx.peer_identities(),
            "peer_identity_key": ctx.peer_identity_key(),
            "peer": peer_shape(ctx.peer()),
        },
    )
    yield b"|".join(got)


def _observe(flavour, kind, server_kind, pki, client):
    make = grpc.ssl_server_credentials if server_kind == "grpcio" else pygrpc_native.ssl_server_credentials
    creds = make([(pki.server.key, pki.server.chain)], pki.ca.cert, client is not None)
    ports = [("add_secure_port", ("127.0.0.1:0", creds))]
    with flavour.serving(server_kind, streams.serving(flavour, kind, {"M": _identity}), ports) as served:
        channel_creds = (
            grpc.ssl_channel_credentials(pki.ca.cert)
            if client is None
            else grpc.ssl_channel_credentials(pki.ca.cert, client.key, client.chain)
        )
        # A channel of its own: grpcio shares connections between channels.
        options = [("grpc.use_local_subchannel_pool", 1)]
        with grpc.secure_channel(f"127.0.0.1:{served.ports[0]}", channel_creds, options) as channel:
            out = streams.call(channel, kind, method("M"), [b"a", b"b"])
        return out.code, out.responses, served.state.wait_for("identity")


@each_flavour
@each_kind
@pytest.mark.parametrize("client", ["client", "client_cn_only"])
def test_mutual_tls_identity_in_stream_handler(flavour, kind, client, pki):
    ref, ours = (_observe(flavour, kind, server_kind, pki, getattr(pki, client)) for server_kind in KINDS)
    assert ours == ref, f"\n  grpcio ({flavour}):        {ref!r}\n  pygrpc_native ({flavour}): {ours!r}"
    code, _, identity = ref
    assert code == grpc.StatusCode.OK
    assert identity["auth_context"]["transport_security_type"] == [b"ssl"]
    assert identity["peer_identities"] and identity["peer_identity_key"]


@each_flavour
@each_kind
def test_server_auth_tls_in_stream_handler(flavour, kind, pki):
    """TLS without a client certificate: no peer identity, the transport is ssl."""
    ref, ours = (_observe(flavour, kind, server_kind, pki, None) for server_kind in KINDS)
    assert ours == ref, f"\n  grpcio ({flavour}):        {ref!r}\n  pygrpc_native ({flavour}): {ours!r}"
    assert ref[2]["auth_context"]["transport_security_type"] == [b"ssl"] and ref[2]["peer_identities"] is None
