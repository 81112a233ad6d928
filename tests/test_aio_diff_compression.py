"""Differential tests: response compression as only grpc.aio shows it (a
unary answer carrying the initial metadata, non-coroutine handlers),
grpc.aio.server() against pygrpc_native.aio.server(), read off the wire
(tests/diff/compression.py). The scenarios both kinds of server share are in
test_diff_compression.py."""

import grpc
import pytest

from diff.aio_harness import both, same, setup_handlers, stream, unary
from diff.compression import BODY, calls, on_wire

pytestmark = pytest.mark.timeout(60)


def test_unary_set_compression_without_sending_metadata():
    """Known difference (README): grpc.aio doesn't compress a unary answer
    that carries the initial metadata; ours does."""

    async def handler(req, ctx):
        ctx.set_compression(grpc.Compression.Gzip)
        return req

    setup = setup_handlers({"Echo": unary(handler)})
    ref, ours = both(setup, on_wire(calls([("Echo", False)])))
    assert ref == ([BODY], [[0]])
    assert ours == ([BODY], [[1]])


def test_sync_handlers_on_the_aio_server():
    """Non-coroutine handlers get grpc.aio's rules too: RuntimeError once the
    initial metadata is sent, per-message compression in a stream."""

    def late(req, ctx):
        ctx.send_initial_metadata(())
        try:
            ctx.set_compression(grpc.Compression.Gzip)
        except RuntimeError as exc:
            return b"RuntimeError: " + str(exc).encode()
        return b"accepted"

    def mixed(req, ctx):
        ctx.set_compression(grpc.Compression.Gzip)
        yield req
        ctx.disable_next_message_compression()
        yield req

    setup = setup_handlers({"Late": unary(late), "Mixed": stream(mixed)})
    ref = same(setup, on_wire(calls([("Late", False), ("Mixed", True)])))
    assert ref == (
        [b"RuntimeError: Compression setting must be specified before sending initial metadata", [BODY, BODY]],
        [[0], [1, 0]],
    )


def test_no_compression_turns_the_servers_default_off():
    """On a server whose default is gzip, grpc.aio answers a call whose
    handler set NoCompression uncompressed (grpcio's sync server keeps the
    default: test_diff_compression.py); ours kept compressing."""

    async def coroutine(req, ctx):
        ctx.set_compression(grpc.Compression.NoCompression)
        yield req
        yield req

    def plain(req, ctx):
        ctx.set_compression(grpc.Compression.NoCompression)
        yield req
        yield req

    setup = setup_handlers({"Coroutine": stream(coroutine), "Plain": stream(plain)})
    ref = same(setup, on_wire(calls([("Coroutine", True), ("Plain", True)])), compression=grpc.Compression.Gzip)
    assert ref == ([[BODY, BODY], [BODY, BODY]], [[0, 0], [0, 0]])
