"""A grpc.aio.Server with generic handlers (coroutines and async generators)
for the four echo methods (unary, server, client and bidi streaming; the
request streams read with ``async for``): grpcio's grpc.aio.server() (the
reference) or pygrpc_native.aio.server() (--impl native), optionally on
uvloop (--uvloop).

No serializers are registered, so the handlers get and return raw bytes.
"""

import asyncio

import grpc
import grpc.aio

from bench.servers import _common


async def _echo(request: bytes, context) -> bytes:
    return request


async def _count(request: bytes, context):
    n, body = _common.parse_count(request)
    for _ in range(n):
        yield body


async def _collect(requests, context) -> bytes:
    last = b""
    async for message in requests:
        last = message
    return last


async def _chat(requests, context):
    async for message in requests:
        yield message


async def _serve(args, stop) -> None:
    if args.impl == "native":
        import pygrpc_native
        import pygrpc_native.aio

        make_server, make_credentials = pygrpc_native.aio.server, pygrpc_native.ssl_server_credentials
    else:
        make_server, make_credentials = grpc.aio.server, grpc.ssl_server_credentials
    handler = grpc.method_handlers_generic_handler(
        _common.SERVICE,
        {
            _common.ECHO_METHOD.rsplit("/", 1)[1]: grpc.unary_unary_rpc_method_handler(_echo),
            _common.COUNT_METHOD.rsplit("/", 1)[1]: grpc.unary_stream_rpc_method_handler(_count),
            _common.COLLECT_METHOD.rsplit("/", 1)[1]: grpc.stream_unary_rpc_method_handler(_collect),
            _common.CHAT_METHOD.rsplit("/", 1)[1]: grpc.stream_stream_rpc_method_handler(_chat),
        },
    )
    options = []
    if args.metrics == "prometheus":
        if args.impl != "native":
            raise SystemExit("--metrics prometheus is pygrpc_native's endpoint: use --impl native")
        options.append(("grpc.pygrpc_native.metrics_address", f"{args.host}:0"))
    server = make_server(handlers=(handler,), options=options)
    port = _common.add_port(server, args, make_credentials)
    await server.start()
    _common.announce(port)
    await asyncio.get_running_loop().run_in_executor(None, _common.wait, stop)
    await server.stop(args.grace)


def main() -> None:
    p = _common.parser(__doc__)
    p.add_argument("--impl", choices=("grpcio", "native"), default="grpcio", help="whose aio.server() to run")
    p.add_argument("--uvloop", action="store_true", help="run on uvloop")
    p.add_argument(
        "--metrics", choices=("off", "prometheus"), default="off", help="A66 metrics: pygrpc_native's Prometheus endpoint"
    )
    args = p.parse_args()
    _common.check_loopback(args.host)
    stop = _common.install_stop_signals()
    if args.uvloop:
        import uvloop

        uvloop.install()
    asyncio.run(_serve(args, stop))


if __name__ == "__main__":
    main()
