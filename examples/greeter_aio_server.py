"""An asyncio greeter served by pygrpc_native.aio.server(), called by a
grpc.aio client on the same event loop.

    python examples/greeter_aio_server.py

Handlers are coroutines (or async generators) and run on the loop that
called start(); uvloop works too (pass --uvloop).
"""

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
from _generated import load_echo

import pygrpc_native.aio

echo_pb2, echo_pb2_grpc = load_echo()


# The Echo service's handlers. add_EchoServicer_to_server() takes any object
# that has them; the generated EchoServicer base is optional, and left out
# here because the generated code exists only at run time, so type checkers
# can't see it (its messages are Any below for the same reason).
class Greeter:
    async def Say(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if not request.message:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "say something")
        return echo_pb2.EchoReply(message=f"hello, {request.message}")

    async def Count(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        for i in range(request.count):
            await asyncio.sleep(0)  # other calls run meanwhile
            yield echo_pb2.EchoReply(message=request.message, index=i)


async def main() -> None:
    server = pygrpc_native.aio.server()  # was: grpc.aio.server()
    echo_pb2_grpc.add_EchoServicer_to_server(Greeter(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"serving on 127.0.0.1:{port}")

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = echo_pb2_grpc.EchoStub(channel)
        reply = await stub.Say(echo_pb2.EchoRequest(message="world"), timeout=5)
        print("Say ->", reply.message)
        replies = [(r.message, r.index) async for r in stub.Count(echo_pb2.CountRequest(message="tick", count=3))]
        print("Count ->", replies)
        try:
            await stub.Say(echo_pb2.EchoRequest(), timeout=5)
        except grpc.aio.AioRpcError as err:
            print("Say('') ->", err.code(), err.details())

    await server.stop(grace=1)


if __name__ == "__main__":
    if "--uvloop" in sys.argv:
        import uvloop

        uvloop.install()
    asyncio.run(main())
