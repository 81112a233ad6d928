"""Servers of each kind and flavour on secure ports, for the TLS tests of
grpcio's credentials (test_tls_grpcio_credentials.py, test_tls_rotation.py).

``serving(kind, flavour, ports)`` starts grpc.server() / grpc.aio.server()
("grpcio") or pygrpc_native's ("native"), sync or aio, with one method,
``/tls.Creds/Who``, that records what the handler read from its context,
and binds each ``(address, credentials)`` of ports (credentials None:
plaintext). aio servers run on an event loop of their own thread, so a test
calls every kind the same way. ``presented()`` reads the certificate a
server presents from the TLS handshake itself, with Python's ssl module.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from concurrent import futures
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import grpc
from cryptography import x509

import pygrpc_native
import pygrpc_native.aio

WHO = "/tls.Creds/Who"
WAIT = 5.0


def _seen(context: Any) -> dict:
    return {
        "auth_context": context.auth_context(),
        "peer_identities": context.peer_identities(),
        "peer_identity_key": context.peer_identity_key(),
    }


class Served:
    def __init__(self) -> None:
        self.ports: List[int] = []
        self.seen: List[dict] = []


def _handlers(served: Served, flavour: str) -> Any:
    if flavour == "aio":

        async def who_async(request: bytes, context: Any) -> bytes:
            served.seen.append(_seen(context))
            return request

        handler = grpc.unary_unary_rpc_method_handler(who_async)
    else:

        def who(request: bytes, context: Any) -> bytes:
            served.seen.append(_seen(context))
            return request

        handler = grpc.unary_unary_rpc_method_handler(who)
    return grpc.method_handlers_generic_handler("tls.Creds", {"Who": handler})


def _bind(server: Any, ports: Sequence[Tuple[str, Any]], served: Served) -> None:
    for address, creds in ports:
        if creds is None:
            served.ports.append(server.add_insecure_port(address))
        else:
            served.ports.append(server.add_secure_port(address, creds))


@contextlib.contextmanager
def serving(kind: str, flavour: str, ports: Sequence[Tuple[str, Any]]) -> Iterator[Served]:
    served = Served()
    if flavour == "sync":
        pool = futures.ThreadPoolExecutor(4)
        server = (grpc.server if kind == "grpcio" else pygrpc_native.server)(pool)
        server.add_generic_rpc_handlers((_handlers(served, flavour),))
        _bind(server, ports, served)
        server.start()
        try:
            yield served
        finally:
            server.stop(None).wait(WAIT)
            pool.shutdown(wait=False)
        return
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> Any:
        server = (grpc.aio.server if kind == "grpcio" else pygrpc_native.aio.server)()
        server.add_generic_rpc_handlers((_handlers(served, flavour),))
        _bind(server, ports, served)
        await server.start()
        return server

    server = asyncio.run_coroutine_threadsafe(start(), loop).result(WAIT)
    try:
        yield served
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(None), loop).result(WAIT)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT)
        loop.close()


def call(target: str, channel_credentials: Any = None, options: Sequence[Tuple[str, Any]] = ()) -> Any:
    """One call on a channel of its own: grpc.StatusCode.OK or the error's
    code."""
    options = [("grpc.use_local_subchannel_pool", 1), *options]
    if channel_credentials is None:
        channel = grpc.insecure_channel(target, options)
    else:
        channel = grpc.secure_channel(target, channel_credentials, options)
    with channel:
        try:
            channel.unary_unary(WHO)(b"hi", timeout=WAIT)
        except grpc.RpcError as err:
            return err.code()
    return grpc.StatusCode.OK


def presented(port: int, server_name: Optional[str] = None, host: str = "127.0.0.1") -> str:
    """The subject of the certificate the server presents in a new TLS
    handshake, asking for server_name (SNI; None: none)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection((host, port), timeout=WAIT) as raw:
        with ctx.wrap_socket(raw, server_hostname=server_name) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
