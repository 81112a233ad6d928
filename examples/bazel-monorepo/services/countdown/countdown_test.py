"""The countdown service streams to a grpc.aio client through
pygrpc_native.aio.server(), and refuses bad counts with grpcio's status codes."""

import unittest

import grpc
import grpc.aio

import countdown


class CountdownTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.server, port = await countdown.start_server()
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        # Raw bytes both ways: no serializers, so the types are said here.
        self.count: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = self.channel.unary_stream(
            f"/{countdown.SERVICE}/Count"
        )

    async def asyncTearDown(self) -> None:
        await self.channel.close()
        await self.server.stop(grace=None)

    async def test_streams_down_to_one(self) -> None:
        replies = [r async for r in self.count(b"3", timeout=10)]
        self.assertEqual(replies, [b"3", b"2", b"1"])

    async def test_not_a_number_is_invalid(self) -> None:
        with self.assertRaises(grpc.aio.AioRpcError) as err:
            [r async for r in self.count(b"three", timeout=10)]
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    async def test_too_long_a_count_is_out_of_range(self) -> None:
        with self.assertRaises(grpc.aio.AioRpcError) as err:
            [r async for r in self.count(str(countdown.MAX_COUNT + 1).encode(), timeout=10)]
        self.assertEqual(err.exception.code(), grpc.StatusCode.OUT_OF_RANGE)


if __name__ == "__main__":
    unittest.main()
