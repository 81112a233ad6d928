"""A grpc.aio.Server with a generic echo handler (a coroutine): grpcio's
grpc.aio.server() (the reference) or pygrpc_native.aio.server()
(--impl native), optionally on uvloop (--uvloop).

No serializers are registered, so the handler gets and returns raw bytes.
"""

import asyncio

import grpc
import grpc.aio

from bench.servers import _common


async def _echo(request: bytes, context) -> bytes:
    return request


async def _serve(args, stop) -> None:
    if args.impl == "native":
        import pygrpc_native.aio

        make_server = pygrpc_native.aio.server
    else:
        make_server = grpc.aio.server
    service, method = _common.ECHO_METHOD.lstrip("/").split("/")
    handler = grpc.method_handlers_generic_handler(service, {method: grpc.unary_unary_rpc_method_handler(_echo)})
    server = make_server(handlers=(handler,))
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    await server.start()
    _common.announce(port)
    await asyncio.get_running_loop().run_in_executor(None, _common.wait, stop)
    await server.stop(args.grace)


def main() -> None:
    p = _common.parser(__doc__)
    p.add_argument("--impl", choices=("grpcio", "native"), default="grpcio", help="whose aio.server() to run")
    p.add_argument("--uvloop", action="store_true", help="run on uvloop")
    args = p.parse_args()
    _common.check_loopback(args.host)
    stop = _common.install_stop_signals()
    if args.uvloop:
        import uvloop

        uvloop.install()
    asyncio.run(_serve(args, stop))


if __name__ == "__main__":
    main()
