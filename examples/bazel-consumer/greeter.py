"""A greeter served by pygrpc_native.server(), grpcio's API with the HTTP/2
and gRPC work done in Go.

    bazel run //:greeter_server -- --port 50051

greeter.Greeter/SayHello takes a name (raw bytes, no protobuf, to keep the
example small) and answers b"Hello, <name>!".
"""

import argparse
from concurrent import futures

import grpc

import pygrpc_native

SERVICE = "greeter.Greeter"


def say_hello(request: bytes, context: grpc.ServicerContext) -> bytes:
    if not request:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "name is empty")
    return b"Hello, " + request + b"!"


def make_server(address: str = "127.0.0.1:0") -> tuple[grpc.Server, int]:
    """Returns (started server, bound port)."""
    server = pygrpc_native.server(futures.ThreadPoolExecutor(max_workers=4))
    handler = grpc.method_handlers_generic_handler(
        SERVICE, {"SayHello": grpc.unary_unary_rpc_method_handler(say_hello)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port(address)
    server.start()
    return server, port


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=50051)
    args = p.parse_args()
    server, port = make_server(f"127.0.0.1:{args.port}")
    print(f"greeter serving on 127.0.0.1:{port}", flush=True)
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:
        server.stop(grace=1).wait()


if __name__ == "__main__":
    main()
