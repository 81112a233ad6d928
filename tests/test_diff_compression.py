"""Differential tests: response compression and compressed requests, read
off the wire (tests/diff/compression.py), each scenario run on both kinds
of server (tests/diff/flavours.py). Scenarios only one kind of server can
express are in test_server_diff_compression.py and
test_aio_diff_compression.py.
"""

import random

import grpc
import pytest

from diff import TRANSPORT
from diff.compression import BODY, calls, on_wire
from diff.flavours import each_flavour
from diff.harness import method
from h2_raw import RawH2, grpc_message, request_headers

pytestmark = pytest.mark.timeout(60)


def _setup(flavour):
    async def echo(req, ctx):
        return req

    async def echo_twice(req, ctx):
        yield req
        yield req

    async def set_gzip(req, ctx):
        ctx.set_compression(grpc.Compression.Gzip)
        if flavour.aio:
            # grpc.aio applies a call's compression when it sends the initial
            # metadata itself (send_initial_metadata(), or a streaming
            # write), not when a unary answer carries it (README: known
            # differences; test_aio_diff_compression.py).
            await ctx.send_initial_metadata(())
        return req

    async def set_none(req, ctx):
        ctx.set_compression(grpc.Compression.NoCompression)
        return req

    async def late_set(req, ctx):
        await ctx.send_initial_metadata((("k", "v"),))
        try:
            ctx.set_compression(grpc.Compression.Gzip)
        except Exception as exc:  # noqa: BLE001
            return type(exc).__name__.encode() + b": " + str(exc).encode()
        return b"accepted"

    async def uncompressed(req, ctx):
        ctx.disable_next_message_compression()
        return req

    async def mixed_stream(req, ctx):
        """A compressed call whose second message goes uncompressed."""
        ctx.set_compression(grpc.Compression.Deflate)
        yield req
        ctx.disable_next_message_compression()
        yield req
        yield req

    return flavour.handlers(
        {
            "Echo": flavour.unary(echo),
            "Stream": flavour.stream(echo_twice),
            "SetGzip": flavour.unary(set_gzip),
            "SetNone": flavour.unary(set_none),
            "LateSet": flavour.unary(late_set),
            "Uncompressed": flavour.unary(uncompressed),
            "MixedStream": flavour.stream(mixed_stream),
        }
    )


ECHO_AND_STREAM = [("Echo", False), ("Stream", True)]


@each_flavour
@pytest.mark.parametrize(
    "kwargs",
    [
        {"compression": grpc.Compression.Gzip},
        {"compression": grpc.Compression.Deflate},
        {"compression": 2},  # grpc.Compression is an IntEnum; ours refused an int
        # What grpcio's int(compression) reads; ours refused them.
        {"compression": True},
        {"compression": 2.0},
        {"compression": "2"},
        {"options": [("grpc.default_compression_algorithm", 2)]},
        {"options": [("grpc.default_compression_algorithm", 1)]},
        # Given by name, as grpc-core reads it too (ours ignored names).
        {"options": [("grpc.default_compression_algorithm", "gzip")]},
        {"options": [("grpc.default_compression_algorithm", b"deflate"), ("grpc.default_compression_algorithm", 2)]},
        # The option wins over the compression= argument, as in grpcio.
        {"options": [("grpc.default_compression_algorithm", 2)], "compression": grpc.Compression.NoCompression},
        {"options": [("grpc.default_compression_level", 1)]},
        {"options": [("grpc.default_compression_level", 3)]},
    ],
    ids=["gzip", "deflate", "int", "true", "float", "str", "option-gzip", "option-deflate", "option-name", "option-name-first", "option-wins", "level-low", "level-high"],
)
def test_server_default_compression(flavour, kwargs):
    # set_compression(NoCompression) leaves the server's default in place on
    # grpcio's servers: the sync one ignores it, and grpc.aio a unary
    # answer's compression when the answer carries the initial metadata
    # (known difference, README: ours honours the handler's setting there,
    # NoCompression as Gzip, unless a compression level wins over it).
    scenario = on_wire(calls(ECHO_AND_STREAM + [("SetNone", False)]))
    ref, ours = flavour.both(_setup(flavour), scenario, **kwargs)
    assert ref == ([BODY, [BODY, BODY], BODY], [[1], [1, 1], [1]])
    level = any(option[0] == "grpc.default_compression_level" for option in kwargs.get("options", ()))
    assert ours == (ref[0], [[1], [1, 1], [0] if flavour.aio and not level else [1]])


@each_flavour
def test_no_compression_by_default(flavour):
    ref = flavour.same(_setup(flavour), on_wire(calls(ECHO_AND_STREAM)))
    assert ref == ([BODY, [BODY, BODY]], [[0], [0, 0]])


@each_flavour
@pytest.mark.parametrize("request_compression", [grpc.Compression.Gzip, grpc.Compression.Deflate], ids=["gzip", "deflate"])
def test_compressed_requests_get_uncompressed_answers(flavour, request_compression):
    """Compressed requests (deflate too) are read; the answer isn't
    compressed unless the server says so (grpc-go alone would mirror the
    request's encoding)."""
    ref = flavour.same(_setup(flavour), on_wire(calls(ECHO_AND_STREAM), request_compression))
    assert ref == ([BODY, [BODY, BODY]], [[0], [0, 0]])


@each_flavour
def test_deflate_request_with_gzip_server(flavour):
    scenario = on_wire(calls(ECHO_AND_STREAM), grpc.Compression.Deflate)
    ref = flavour.same(_setup(flavour), scenario, compression=grpc.Compression.Gzip)
    assert ref == ([BODY, [BODY, BODY]], [[1], [1, 1]])


@each_flavour
def test_per_call_compression(flavour):
    # Too late, once the initial metadata went: the sync server ignores it,
    # grpc.aio raises.
    ref = flavour.same(_setup(flavour), on_wire(calls([("SetGzip", False), ("LateSet", False), ("Echo", False)])))
    late = flavour.pick(
        sync=b"accepted", aio=b"RuntimeError: Compression setting must be specified before sending initial metadata"
    )
    assert ref == ([BODY, late, BODY], [[1], [0], [0]])


@each_flavour
def test_set_compression_none(flavour):
    # Both of grpcio's servers take None as no compression; ours raised.
    async def none(req, ctx):
        ctx.set_compression(None)
        return req

    setup = flavour.handlers({"None": flavour.unary(none)})
    assert flavour.same(setup, on_wire(calls([("None", False)]))) == ([BODY], [[0]])


@each_flavour
@pytest.mark.parametrize("value", ["gzip", 7], ids=["str", "int"])
def test_set_compression_that_is_not_a_compression(flavour, value):
    """grpc.aio ignores it (no compression); grpc.server() fails as it sends
    the answer and never answers the call. Ours raises where it is set, so
    the call ends UNKNOWN at once (README: known differences). Ours used to
    fail the call on aio.server() too."""

    async def odd(req, ctx):
        ctx.set_compression(value)
        return req

    setup = flavour.handlers({"Odd": flavour.unary(odd)})

    def scenario(run):
        try:
            return run.channel.unary_unary(method("Odd"))(BODY, timeout=2)
        except grpc.RpcError as err:
            return err.code(), err.details()

    ref, ours = flavour.both(setup, scenario)
    if flavour.aio:
        assert ref == ours == BODY
    else:
        assert ref == (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        wanted = f"Exception calling application: compression must be a grpc.Compression, got {value!r}"
        assert ours == (grpc.StatusCode.UNKNOWN, wanted)


@each_flavour
def test_disable_next_message_compression(flavour):
    scenario = on_wire(calls([("Uncompressed", False), ("MixedStream", True)]))
    ref = flavour.same(_setup(flavour), scenario, compression=grpc.Compression.Gzip)
    assert ref == ([BODY, [BODY, BODY, BODY]], [[0], [1, 0, 1]])


@each_flavour
def test_client_streaming_handler_compression(flavour):
    """A client-streaming handler's set_compression() reaches the client, as
    the server's default does."""

    async def collect(requests, ctx):
        ctx.set_compression(grpc.Compression.Gzip)
        if flavour.aio:
            await ctx.send_initial_metadata(())  # see _setup's set_gzip
        return b"".join([r async for r in requests])

    async def plain(requests, ctx):
        return b"".join([r async for r in requests])

    setup = flavour.handlers({"Collect": flavour.stream_unary(collect), "Plain": flavour.stream_unary(plain)})

    def drive(channel):
        return [channel.stream_unary(method(name))(iter([BODY, BODY]), timeout=5) for name in ("Collect", "Plain")]

    assert flavour.same(setup, on_wire(drive)) == ([BODY + BODY] * 2, [[1], [0]])
    assert flavour.same(setup, on_wire(drive), compression=grpc.Compression.Deflate) == ([BODY + BODY] * 2, [[1], [1]])


def _request_in(compression):
    """A scenario: one call whose request is compressed so; "OK" or the
    error's code and details."""

    def scenario(run):
        with grpc.insecure_channel(run.target, compression=compression) as channel:
            try:
                channel.unary_unary(method("Echo"))(BODY, timeout=5)
            except grpc.RpcError as err:
                return err.code(), err.details()
        return "OK"

    return scenario


@each_flavour
@pytest.mark.parametrize(
    "bits, request_compression, want",
    [
        (1, grpc.Compression.Gzip, (grpc.StatusCode.UNIMPLEMENTED, "Compression algorithm 'gzip' is disabled.")),
        (1, grpc.Compression.Deflate, (grpc.StatusCode.UNIMPLEMENTED, "Compression algorithm 'deflate' is disabled.")),
        (1, grpc.Compression.NoCompression, "OK"),
        (5, grpc.Compression.Gzip, "OK"),
        (3, grpc.Compression.Deflate, "OK"),
    ],
    ids=["gzip-off", "deflate-off", "identity", "gzip-on", "deflate-on"],
)
def test_compression_enabled_algorithms_bitset(flavour, bits, request_compression, want):
    """Requests in an encoding the server disabled are UNIMPLEMENTED, as in
    grpcio (tests_aio/unit/compression_test)."""
    options = [("grpc.compression_enabled_algorithms_bitset", bits)]
    assert flavour.same(_setup(flavour), _request_in(request_compression), options=options) == want


@each_flavour
@pytest.mark.parametrize(
    "kwargs",
    [
        {"options": [("grpc.compression_enabled_algorithms_bitset", 3), ("grpc.default_compression_algorithm", 2)]},
        {"options": [("grpc.compression_enabled_algorithms_bitset", 3)], "compression": grpc.Compression.Gzip},
    ],
    ids=["option", "argument"],
)
def test_disabled_default_compression_falls_back_to_none(flavour, kwargs):
    """A server default the bitset disables compresses nothing, as grpcio
    switches it to none; a handler's set_compression() still compresses."""
    ref = flavour.same(_setup(flavour), on_wire(calls([("Echo", False), ("SetGzip", False)])), **kwargs)
    assert ref == ([BODY, BODY], [[0], [1]])


@each_flavour
def test_empty_messages_go_uncompressed(flavour):
    """grpcio (and grpc-go) send an empty message uncompressed in a
    compressed call; the default transport gzipped it (23 bytes)."""

    async def empty(req, ctx):
        return b""

    async def empty_then_body(req, ctx):
        yield b""
        yield req

    setup = flavour.handlers({"Empty": flavour.unary(empty), "Mixed": flavour.stream(empty_then_body)})
    ref = flavour.same(setup, on_wire(calls([("Empty", False), ("Mixed", True)])), compression=grpc.Compression.Gzip)
    assert ref == ([b"", [b"", BODY]], [[0], [0, 1]])


@each_flavour
def test_messages_compression_would_not_shrink_go_uncompressed(flavour):
    """grpc-core sends a message uncompressed (flag 0) in a compressed call
    unless compressing makes it smaller: short messages and random bytes.
    Ours gzipped them all (b"ok" in 26 bytes); grpc-go's transport still
    does (README)."""
    noise = random.Random(7).randbytes(300)

    async def short(req, ctx):
        return b"ok"

    async def random_bytes(req, ctx):
        return noise

    async def mixed(req, ctx):
        yield b"ok"
        yield req
        yield noise

    setup = flavour.handlers({"Short": flavour.unary(short), "Random": flavour.unary(random_bytes), "Mixed": flavour.stream(mixed)})
    scenario = on_wire(calls([("Short", False), ("Random", False), ("Mixed", True)]))
    for compression in (grpc.Compression.Gzip, grpc.Compression.Deflate):
        ref, ours = flavour.both(setup, scenario, compression=compression)
        assert ref == ([b"ok", noise, [b"ok", BODY, noise]], [[0], [0], [0, 1, 0]])
        assert ours == ((ref[0], [[1], [1], [1, 1, 1]]) if TRANSPORT == "grpcgo" else ref)


@each_flavour
def test_an_empty_compressed_request_is_an_empty_message(flavour):
    """A request with the compressed flag, grpc-encoding gzip and no
    payload: grpcio reads an empty message; ours answered INTERNAL (the
    gzip reader's EOF). grpc-go's transport still does (README)."""

    async def echo(req, ctx):
        return b"got " + str(len(req)).encode()

    def scenario(run):
        with RawH2(run.port) as raw:
            raw.headers(1, request_headers(method("Echo"), extra=[("grpc-encoding", "gzip")]))
            raw.data(1, grpc_message(b"", compressed=True))
            return raw.statuses([1])

    ref, ours = flavour.both(flavour.handlers({"Echo": flavour.unary(echo)}), scenario)
    assert ref == {1: "0"}
    assert ours == ({1: "13"} if TRANSPORT == "grpcgo" else ref)
