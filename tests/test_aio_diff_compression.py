"""Differential tests: response compression and compressed requests on
grpc.aio.server() and pygrpc_native.aio.server(), read off the wire as in
test_server_diff_compression.py (whose payload and tap it shares)."""

import grpc
import pytest

from diff.aio_harness import both, method, same, setup_handlers, stream, unary
from diff.wiretap import WireTap

pytestmark = pytest.mark.timeout(60)

BODY = b"compressible " * 100


async def _echo(req, ctx):
    return req


async def _set_gzip(req, ctx):
    ctx.set_compression(grpc.Compression.Gzip)
    # grpc.aio applies a call's compression when it sends the initial
    # metadata itself (send_initial_metadata(), or a streaming write), not
    # when a unary answer carries it (README: known differences).
    await ctx.send_initial_metadata(())
    return req


async def _set_none(req, ctx):
    ctx.set_compression(grpc.Compression.NoCompression)
    return req


async def _late_set(req, ctx):
    await ctx.send_initial_metadata((("k", "v"),))
    try:
        ctx.set_compression(grpc.Compression.Gzip)
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__.encode() + b": " + str(exc).encode()
    return b"accepted"


async def _uncompressed(req, ctx):
    ctx.disable_next_message_compression()
    return req


async def _mixed_stream(req, ctx):
    ctx.set_compression(grpc.Compression.Deflate)
    yield req
    ctx.disable_next_message_compression()
    yield req
    yield req


def _setup(server, state):
    setup_handlers(
        {
            "Echo": unary(_echo),
            "SetGzip": unary(_set_gzip),
            "SetNone": unary(_set_none),
            "LateSet": unary(_late_set),
            "Uncompressed": unary(_uncompressed),
            "MixedStream": stream(_mixed_stream),
        }
    )(server, state)


def _on_wire(calls, request_compression=None):
    def scenario(run):
        tap = WireTap(run.port)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{tap.port}", compression=request_compression) as channel:
                got = []
                for name, streaming in calls:
                    if streaming:
                        got.append(list(channel.unary_stream(method(name))(BODY, timeout=5)))
                    else:
                        got.append(channel.unary_unary(method(name))(BODY, timeout=5))
            return got, tap.response_flags()
        finally:
            tap.close()

    return scenario


@pytest.mark.parametrize(
    "kwargs",
    [{"compression": grpc.Compression.Gzip}, {"options": [("grpc.default_compression_algorithm", 1)]}],
    ids=["gzip", "option-deflate"],
)
def test_server_default_compression(kwargs):
    ref = same(_setup, _on_wire([("Echo", False), ("SetNone", False)]), **kwargs)
    # grpc.aio's set_compression(NoCompression) changes nothing.
    assert ref == ([BODY, BODY], [[1], [1]])


def test_per_call_compression():
    ref = same(_setup, _on_wire([("SetGzip", False), ("Echo", False), ("LateSet", False)]))
    assert ref[1] == [[1], [0], [0]]
    assert ref[0][2].startswith(b"RuntimeError")


def test_disable_next_message_compression():
    ref = same(_setup, _on_wire([("Uncompressed", False), ("MixedStream", True)]), compression=grpc.Compression.Gzip)
    assert ref == ([BODY, [BODY, BODY, BODY]], [[0], [1, 0, 1]])


@pytest.mark.parametrize("request_compression", [grpc.Compression.Gzip, grpc.Compression.Deflate], ids=["gzip", "deflate"])
def test_compressed_requests(request_compression):
    ref = same(_setup, _on_wire([("Echo", False)], request_compression))
    assert ref == ([BODY], [[0]])


def test_unary_set_compression_without_sending_metadata():
    """Known difference (README): grpc.aio doesn't compress a unary answer
    that carries the initial metadata; ours does."""

    async def handler(req, ctx):
        ctx.set_compression(grpc.Compression.Gzip)
        return req

    setup = setup_handlers({"Echo": unary(handler)})
    ref, ours = both(setup, _on_wire([("Echo", False)]))
    assert ref == ([BODY], [[0]])
    assert ours == ([BODY], [[1]])


def test_fallback_handler_compression_is_relayed():
    """Client-streaming methods run on the fallback; their handler's
    set_compression() reaches the client, as the server's default does."""

    async def collect(requests, ctx):
        ctx.set_compression(grpc.Compression.Gzip)
        await ctx.send_initial_metadata(())
        return b"".join([r async for r in requests])

    async def plain(requests, ctx):
        return b"".join([r async for r in requests])

    def setup(server, state):
        setup_handlers(
            {"Collect": grpc.stream_unary_rpc_method_handler(collect), "Plain": grpc.stream_unary_rpc_method_handler(plain)}
        )(server, state)

    def scenario(run):
        tap = WireTap(run.port)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{tap.port}") as channel:
                got = [channel.stream_unary(method(name))(iter([BODY]), timeout=5) for name in ("Collect", "Plain")]
            return got, tap.response_flags()
        finally:
            tap.close()

    assert same(setup, scenario) == ([BODY, BODY], [[1], [0]])
    assert same(setup, scenario, compression=grpc.Compression.Deflate) == ([BODY, BODY], [[1], [1]])


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
    ref = same(setup, _on_wire([("Late", False), ("Mixed", True)]))
    assert ref == (
        [b"RuntimeError: Compression setting must be specified before sending initial metadata", [BODY, BODY]],
        [[0], [1, 0]],
    )
