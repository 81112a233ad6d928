"""Smoke test of an installed wheel: a grpcio client calls our servers.

Run by wheels/check.sh with the interpreter of a fresh venv (or an emulated
aarch64 Python) that has the wheel and grpcio installed, from a directory
outside the source tree so the installed package is the one imported:

    python smoke.py                    # server(): unary and server streaming
    python smoke.py --aio --tls CERT KEY   # also aio.server() and a TLS call

Handlers take and return bytes, so no generated code or protobuf is needed.
Exits non-zero with the reason when any call's answer is wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from concurrent import futures

import grpc

import pygrpc_native
from pygrpc_native import aio as pgn_aio

SERVICE = "smoke.Echo"
DEADLINE_S = 120  # generous: the aarch64 run is emulated


def _unary(request: bytes, context: grpc.ServicerContext) -> bytes:
    return b"echo:" + request


def _stream(request: bytes, context: grpc.ServicerContext):
    for i in range(3):
        yield b"%d:" % i + request


async def _aio_unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return b"aio:" + request


def _handlers(unary) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(SERVICE, {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Stream": grpc.unary_stream_rpc_method_handler(_stream),
    })


def _expect(what: str, got: object, want: object) -> None:
    if got != want:
        sys.exit(f"smoke: {what}: got {got!r}, want {want!r}")
    print(f"smoke: {what}: ok", flush=True)


def _call(channel: grpc.Channel, what: str) -> None:
    unary = channel.unary_unary(f"/{SERVICE}/Unary")
    stream = channel.unary_stream(f"/{SERVICE}/Stream")
    _expect(f"{what} unary", unary(b"hi", timeout=DEADLINE_S), b"echo:hi")
    _expect(f"{what} server streaming", list(stream(b"s", timeout=DEADLINE_S)), [b"0:s", b"1:s", b"2:s"])


def sync_server() -> None:
    server = pygrpc_native.server(futures.ThreadPoolExecutor(4))
    server.add_generic_rpc_handlers((_handlers(_unary),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            _call(channel, "server()")
    finally:
        server.stop(None)


def tls_server(cert_path: str, key_path: str) -> None:
    with open(cert_path, "rb") as f:
        cert = f.read()
    with open(key_path, "rb") as f:
        key = f.read()
    server = pygrpc_native.server(futures.ThreadPoolExecutor(4))
    server.add_generic_rpc_handlers((_handlers(_unary),))
    port = server.add_secure_port("127.0.0.1:0", pygrpc_native.ssl_server_credentials([(key, cert)]))
    server.start()
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=cert)
        options = (("grpc.ssl_target_name_override", "localhost"),)
        with grpc.secure_channel(f"127.0.0.1:{port}", creds, options) as channel:
            _call(channel, "server() over TLS")
    finally:
        server.stop(None)


async def aio_server() -> None:
    server = pgn_aio.server()
    server.add_generic_rpc_handlers((_handlers(_aio_unary),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            answer = await channel.unary_unary(f"/{SERVICE}/Unary")(b"hi", timeout=DEADLINE_S)
            _expect("aio.server() unary", answer, b"aio:hi")
    finally:
        await server.stop(None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--aio", action="store_true", help="also serve through aio.server()")
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"), help="also make a TLS call (PEM files)")
    args = parser.parse_args()
    print(f"smoke: Python {sys.version.split()[0]}, pygrpc_native from {pygrpc_native.__file__}", flush=True)
    sync_server()
    if args.aio:
        asyncio.run(aio_server())
    if args.tls:
        tls_server(*args.tls)


if __name__ == "__main__":
    main()
