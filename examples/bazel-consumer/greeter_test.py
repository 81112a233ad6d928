"""The greeter answers a grpcio client through pygrpc_native.server()."""

import unittest

import grpc

import greeter


class GreeterTest(unittest.TestCase):
    def setUp(self):
        self.server, port = greeter.make_server()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.say_hello = self.channel.unary_unary(f"/{greeter.SERVICE}/SayHello")

    def tearDown(self):
        self.channel.close()
        self.server.stop(grace=None).wait(10)

    def test_says_hello(self):
        self.assertEqual(self.say_hello(b"Bazel", timeout=10), b"Hello, Bazel!")

    def test_empty_name_is_invalid(self):
        with self.assertRaises(grpc.RpcError) as err:
            self.say_hello(b"", timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(err.exception.details(), "name is empty")

    def test_unknown_method_is_unimplemented(self):
        with self.assertRaises(grpc.RpcError) as err:
            self.channel.unary_unary(f"/{greeter.SERVICE}/Nope")(b"x", timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.UNIMPLEMENTED)


if __name__ == "__main__":
    unittest.main()
