"""The greeter answers a grpcio client through pygrpc_native.server()."""

import unittest

import grpc

import greeter


class GreeterTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server, port = greeter.make_server()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        # Raw bytes both ways: no serializers, so the types are said here.
        self.say_hello: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(
            f"/{greeter.SERVICE}/SayHello"
        )

    def tearDown(self) -> None:
        self.channel.close()
        self.server.stop(grace=None).wait(10)

    def test_says_hello(self) -> None:
        self.assertEqual(self.say_hello(b"Bazel", timeout=10), b"Hello, Bazel!")

    def test_empty_name_is_invalid(self) -> None:
        with self.assertRaises(grpc.RpcError) as err:
            self.say_hello(b"", timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(err.exception.details(), "name is empty")

    def test_unknown_method_is_unimplemented(self) -> None:
        nope: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(f"/{greeter.SERVICE}/Nope")
        with self.assertRaises(grpc.RpcError) as err:
            nope(b"x", timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.UNIMPLEMENTED)


if __name__ == "__main__":
    unittest.main()
