"""TLS under pygrpc_native.aio.server(), compared with grpc.aio.server()
for the same certificates (the sync server's cases are in
test_tls_server.py; aio shares its ports and credentials code)."""

import asyncio

import grpc
import grpc.aio
import pytest

import pygrpc_native
import pygrpc_native.aio
from tls_certs import make_pki

pytestmark = pytest.mark.timeout(60)

SERVICE = "tls.Tls"


@pytest.fixture(scope="module")
def pki():
    return make_pki()


async def _observe(kind, pki, client, *, roots, require, method="Who"):
    seen = {}

    async def who(request, context):
        seen["auth_context"] = {k: v for k, v in context.auth_context().items() if not k.startswith("ssl_")}
        seen["peer_identities"] = context.peer_identities()
        seen["peer_identity_key"] = context.peer_identity_key()
        return request

    def who_sync(request, context):  # a non-coroutine handler: the sync context
        seen["auth_context"] = {k: v for k, v in context.auth_context().items() if not k.startswith("ssl_")}
        seen["peer_identities"] = context.peer_identities()
        seen["peer_identity_key"] = context.peer_identity_key()
        return request

    if kind == "grpcio":
        server = grpc.aio.server()
        creds = grpc.ssl_server_credentials([(pki.server.key, pki.server.chain)], roots, require)
    else:
        server = pygrpc_native.aio.server()
        creds = pygrpc_native.ssl_server_credentials([(pki.server.key, pki.server.chain)], roots, require)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                SERVICE,
                {
                    "Who": grpc.unary_unary_rpc_method_handler(who),
                    "WhoSync": grpc.unary_unary_rpc_method_handler(who_sync),
                },
            ),
        )
    )
    port = server.add_secure_port("127.0.0.1:0", creds)
    await server.start()
    try:
        channel_creds = (
            grpc.ssl_channel_credentials(pki.ca.cert)
            if client is None
            else grpc.ssl_channel_credentials(pki.ca.cert, client.key, client.chain)
        )
        async with grpc.aio.secure_channel(
            f"127.0.0.1:{port}", channel_creds, [("grpc.use_local_subchannel_pool", 1)]
        ) as ch:
            try:
                await ch.unary_unary(f"/{SERVICE}/{method}")(b"hi", timeout=5)
            except grpc.RpcError as err:
                return {"code": err.code()}
        return {"code": grpc.StatusCode.OK, **seen}
    finally:
        await server.stop(0)


def _same(pki, client, *, roots=None, require=False, method="Who"):
    ref, ours = (
        asyncio.run(_observe(kind, pki, client, roots=roots, require=require, method=method))
        for kind in ("grpcio", "native")
    )
    assert ours == ref, f"\n  grpc.aio.server():          {ref!r}\n  pygrpc_native.aio.server(): {ours!r}"
    return ref


@pytest.mark.parametrize("method", ["Who", "WhoSync"])
def test_mutual_tls_identity(pki, method):
    got = _same(pki, pki.client, roots=pki.ca.cert, require=True, method=method)
    assert got["code"] == grpc.StatusCode.OK
    assert got["peer_identity_key"] == "x509_subject_alternative_name"
    assert got["auth_context"]["x509_common_name"] == [b"test-client"]


def test_server_auth_tls(pki):
    got = _same(pki, None)
    assert got["code"] == grpc.StatusCode.OK
    assert got["peer_identities"] is None


@pytest.mark.parametrize("client", ["none", "other_client"])
def test_mutual_tls_refuses(pki, client):
    assert _same(pki, getattr(pki, client, None), roots=pki.ca.cert, require=True) == {
        "code": grpc.StatusCode.UNAVAILABLE
    }


def test_unreadable_grpcio_credentials_are_a_type_error(pki):
    async def scenario():
        server = pygrpc_native.aio.server()
        try:
            unreadable = grpc.ssl_server_credentials.__wrapped__([(pki.server.key, pki.server.chain)])
            with pytest.raises(TypeError, match=r"pygrpc_native\.ssl_server_credentials\(\)"):
                server.add_secure_port("127.0.0.1:0", unreadable)
        finally:
            await server.stop(None)

    asyncio.run(scenario())
