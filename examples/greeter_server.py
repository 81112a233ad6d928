"""A sync greeter served by pygrpc_native.server(), called by a grpcio client.

    python examples/greeter_server.py

The servicer and the generated code are ordinary grpcio-tools output; only
the line that creates the server differs from a grpcio server. The code is
generated from proto/echo.proto into a temporary directory at start.
"""

from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
from _generated import load_echo

import pygrpc_native

echo_pb2, echo_pb2_grpc = load_echo()


# The Echo service's handlers. add_EchoServicer_to_server() takes any object
# that has them; the generated EchoServicer base is optional, and left out
# here because the generated code exists only at run time, so type checkers
# can't see it (its messages are Any below for the same reason).
class Greeter:
    def Say(self, request: Any, context: grpc.ServicerContext) -> Any:
        if not request.message:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "say something")
        return echo_pb2.EchoReply(message=f"hello, {request.message}")

    def Count(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        for i in range(request.count):
            yield echo_pb2.EchoReply(message=request.message, index=i)


def main() -> None:
    server = pygrpc_native.server(futures.ThreadPoolExecutor(8))  # was: grpc.server(...)
    echo_pb2_grpc.add_EchoServicer_to_server(Greeter(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"serving on 127.0.0.1:{port}")

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = echo_pb2_grpc.EchoStub(channel)
        print("Say ->", stub.Say(echo_pb2.EchoRequest(message="world"), timeout=5).message)
        replies = stub.Count(echo_pb2.CountRequest(message="tick", count=3), timeout=5)
        print("Count ->", [(r.message, r.index) for r in replies])
        try:
            stub.Say(echo_pb2.EchoRequest(), timeout=5)
        except grpc.RpcError as err:
            print("Say('') ->", err.code(), err.details())

    server.stop(grace=1).wait()


if __name__ == "__main__":
    main()
