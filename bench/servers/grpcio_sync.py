"""A grpc.Server with a thread pool and a generic echo handler: grpcio's
grpc.server() (the reference) or pygrpc_native.server() (--impl native),
with the same handler and arguments.

No serializers are registered, so the handler gets and returns raw bytes, the
same work the low-level server does.
"""

from concurrent import futures

import grpc

from bench.servers import _common


def _echo(request: bytes, context) -> bytes:
    return request


def main() -> None:
    p = _common.parser(__doc__)
    p.add_argument("--workers", type=int, default=4, help="ThreadPoolExecutor max_workers")
    p.add_argument("--impl", choices=("grpcio", "native"), default="grpcio", help="whose server() to run")
    args = p.parse_args()
    _common.check_loopback(args.host)
    stop = _common.install_stop_signals()

    service, method = _common.ECHO_METHOD.lstrip("/").split("/")
    handler = grpc.method_handlers_generic_handler(
        service, {method: grpc.unary_unary_rpc_method_handler(_echo)}
    )
    if args.impl == "native":
        import pygrpc_native

        make_server = pygrpc_native.server
    else:
        make_server = grpc.server
    server = make_server(futures.ThreadPoolExecutor(max_workers=args.workers))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    server.start()
    _common.announce(port)
    _common.wait(stop)
    server.stop(args.grace).wait()


if __name__ == "__main__":
    main()
