"""A low-level pygrpc-native server answered by a grpcio client, in one script.

    python examples/lowlevel_echo.py

The server is a NativeGrpcFront serving /echo.Echo/Say (unary) and
/echo.Echo/Count (server streaming). Python threads take calls in batches
with recv_batch() and answer them by id. The client is plain grpcio.
"""

import threading

import grpc

from pygrpc_native import EVENT_CALL, NativeGrpcFront

SAY, COUNT = 0, 1  # method ids: positions in the methods list


def serve(front: NativeGrpcFront) -> None:
    while (events := front.recv_batch(64)) is not None:
        for kind, call_id, method_id, payload, client_key in events:
            if kind != EVENT_CALL:
                continue  # EVENT_CANCEL: the client went away or its deadline passed
            assert payload is not None  # an EVENT_CALL carries its request
            if method_id == SAY:
                front.respond(call_id, b"hello, " + payload)
            else:
                for i in range(int(payload or b"3")):
                    front.send_message(call_id, b"%d" % i)
                front.finish(call_id, 0, trailing_metadata=[("served-by", "pygrpc-native")])


def main() -> None:
    front = NativeGrpcFront("127.0.0.1:0", [("/echo.Echo/Say", False), ("/echo.Echo/Count", True)])
    front.start()
    workers = [threading.Thread(target=serve, args=(front,)) for _ in range(2)]
    for w in workers:
        w.start()
    print(f"serving on 127.0.0.1:{front.port}")

    with grpc.insecure_channel(f"127.0.0.1:{front.port}") as channel:
        # Raw bytes both ways: no serializers, so the types are said here.
        say: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary("/echo.Echo/Say")
        print("Say ->", say(b"world", timeout=5))
        count_method: grpc.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream("/echo.Echo/Count")
        count = count_method(b"4", timeout=5)
        print("Count ->", [m.decode() for m in count], dict(count.trailing_metadata() or ()))
        missing: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary("/echo.Echo/Missing")
        try:
            missing(b"", timeout=5)
        except grpc.RpcError as err:
            print("Missing ->", err.code(), err.details())

    print("metrics:", {k: v for k, v in front.metrics().items() if k.startswith("calls_")})
    front.stop(grace=1.0)
    for w in workers:
        w.join()


if __name__ == "__main__":
    main()
