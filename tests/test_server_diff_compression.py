"""Differential tests: response compression and compressed requests on
grpc.server() and pygrpc_native.server().

grpcio's client API doesn't tell whether a response travelled compressed,
so each scenario calls through a WireTap (tests/diff/wiretap.py) and
compares the compressed flag of every response message on the wire, per
call, along with what the client received. Payloads are compressible and
non-empty: grpc-core sends a message uncompressed when compressing doesn't
shrink it.
"""

import grpc
import pytest

from diff.harness import both, method, same, setup_handlers, stream, unary
from diff.wiretap import WireTap

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode
BODY = b"compressible " * 100


def _set_compression_unary(req, ctx):
    ctx.set_compression(grpc.Compression.Gzip)
    return req


def _late_set_compression_unary(req, ctx):
    ctx.send_initial_metadata((("k", "v"),))
    ctx.set_compression(grpc.Compression.Gzip)  # too late: grpcio ignores it
    return req


def _uncompressed_unary(req, ctx):
    ctx.disable_next_message_compression()
    return req


def _mixed_stream(req, ctx):
    """Compressed call whose second message goes uncompressed."""
    ctx.set_compression(grpc.Compression.Deflate)
    yield req
    ctx.disable_next_message_compression()
    yield req
    yield req


def _setup(server, state):
    setup_handlers(
        {
            "Echo": unary(lambda req, ctx: req),
            "Stream": stream(lambda req, ctx: iter([req, req])),
            "SetCompression": unary(_set_compression_unary),
            "LateSetCompression": unary(_late_set_compression_unary),
            "Uncompressed": unary(_uncompressed_unary),
            "MixedStream": stream(_mixed_stream),
        }
    )(server, state)


def _on_wire(calls, request_compression=None):
    """A scenario: the calls (method name, streaming) through a wire tap;
    what the client got and the response flags per call."""

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


ECHO_AND_STREAM = [("Echo", False), ("Stream", True)]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"compression": grpc.Compression.Gzip},
        {"compression": grpc.Compression.Deflate},
        {"options": [("grpc.default_compression_algorithm", 2)]},
        {"options": [("grpc.default_compression_algorithm", 1)]},
        # The option wins over the compression= argument, as in grpcio.
        {"options": [("grpc.default_compression_algorithm", 2)], "compression": grpc.Compression.NoCompression},
        {"options": [("grpc.default_compression_level", 1)]},
        {"options": [("grpc.default_compression_level", 3)]},
    ],
    ids=["gzip", "deflate", "option-gzip", "option-deflate", "option-wins", "level-low", "level-high"],
)
def test_server_default_compression(kwargs):
    ref = same(_setup, _on_wire(ECHO_AND_STREAM), **kwargs)
    assert ref == ([BODY, [BODY, BODY]], [[1], [1, 1]])


def test_no_compression_by_default():
    ref = same(_setup, _on_wire(ECHO_AND_STREAM))
    assert ref == ([BODY, [BODY, BODY]], [[0], [0, 0]])


@pytest.mark.parametrize("request_compression", [grpc.Compression.Gzip, grpc.Compression.Deflate], ids=["gzip", "deflate"])
def test_compressed_requests_get_uncompressed_answers(request_compression):
    """Compressed requests (deflate too) are read; the answer isn't
    compressed unless the server says so (grpc-go alone would mirror the
    request's encoding)."""
    ref = same(_setup, _on_wire(ECHO_AND_STREAM, request_compression))
    assert ref == ([BODY, [BODY, BODY]], [[0], [0, 0]])


def test_deflate_request_with_gzip_server():
    ref = same(_setup, _on_wire(ECHO_AND_STREAM, grpc.Compression.Deflate), compression=grpc.Compression.Gzip)
    assert ref == ([BODY, [BODY, BODY]], [[1], [1, 1]])


def test_per_call_compression():
    calls = [("SetCompression", False), ("LateSetCompression", False), ("Echo", False)]
    ref = same(_setup, _on_wire(calls))
    assert ref == ([BODY, BODY, BODY], [[1], [0], [0]])


def test_per_call_no_compression_changes_nothing():
    """grpcio's sync set_compression(NoCompression) leaves the server's
    default in place."""
    def set_none(req, ctx):
        ctx.set_compression(grpc.Compression.NoCompression)
        return req

    def setup(server, state):
        setup_handlers({"SetNone": unary(set_none), "Echo": unary(lambda req, ctx: req)})(server, state)

    ref = same(setup, _on_wire([("SetNone", False), ("Echo", False)]), compression=grpc.Compression.Gzip)
    assert ref == ([BODY, BODY], [[1], [1]])


def test_disable_next_message_compression():
    calls = [("Uncompressed", False), ("MixedStream", True)]
    ref = same(_setup, _on_wire(calls), compression=grpc.Compression.Gzip)
    assert ref == ([BODY, [BODY, BODY, BODY]], [[0], [1, 0, 1]])


def _collect_setup(server, state):
    def collect(requests, ctx):
        return b"".join(requests)

    def collect_gzip(requests, ctx):
        ctx.set_compression(grpc.Compression.Gzip)
        return b"".join(requests)

    setup_handlers(
        {"Collect": grpc.stream_unary_rpc_method_handler(collect), "CollectGzip": grpc.stream_unary_rpc_method_handler(collect_gzip)}
    )(server, state)


def _collect_on_wire(name):
    def scenario(run):
        tap = WireTap(run.port)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{tap.port}") as channel:
                got = channel.stream_unary(method(name))(iter([BODY, BODY]), timeout=5)
            return got, tap.response_flags()
        finally:
            tap.close()

    return scenario


def test_client_streaming_methods_get_the_server_compression():
    """Client-streaming methods run on the fallback; Go compresses their
    answers as the server says."""
    ref = same(_collect_setup, _collect_on_wire("Collect"), compression=grpc.Compression.Gzip)
    assert ref == (BODY + BODY, [[1]])


def test_client_streaming_handler_compression_is_relayed():
    """A fallback handler's set_compression() reaches the client."""
    ref = same(_collect_setup, _collect_on_wire("CollectGzip"))
    assert ref == (BODY + BODY, [[1]])


def test_client_that_accepts_no_compression():
    """Known difference (README): grpc-go compresses only with an algorithm
    the client advertised; grpc-core compresses anyway, and such a grpcio
    client then fails the call."""

    def scenario(run):
        tap = WireTap(run.port)
        try:
            options = [("grpc.compression_enabled_algorithms_bitset", 1)]  # identity only
            with grpc.insecure_channel(f"127.0.0.1:{tap.port}", options=options) as channel:
                try:
                    got = channel.unary_unary(method("Echo"))(BODY, timeout=5)
                except grpc.RpcError as err:
                    got = err.code()
            return got, tap.response_flags()
        finally:
            tap.close()

    ref, ours = both(_setup, scenario, compression=grpc.Compression.Gzip)
    assert ref == (SC.INTERNAL, [[1]])
    assert ours == (BODY, [[0]])


def test_disable_next_message_compression_after_a_compressed_request():
    """Known difference (README): grpc-go keeps compressing that message."""
    ref, ours = both(_setup, _on_wire([("Uncompressed", False)], grpc.Compression.Gzip), compression=grpc.Compression.Gzip)
    assert ref == ([BODY], [[0]])
    assert ours == ([BODY], [[1]])


def test_fallback_disable_next_message_compression_is_relayed():
    """In handlers on the fallback (here bidi) too."""

    def chat(requests, ctx):
        for i, request in enumerate(requests):
            if i == 1:
                ctx.disable_next_message_compression()
            yield request

    def setup(server, state):
        setup_handlers({"Chat": grpc.stream_stream_rpc_method_handler(chat)})(server, state)

    def scenario(run):
        tap = WireTap(run.port)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{tap.port}") as channel:
                got = list(channel.stream_stream(method("Chat"))(iter([BODY, BODY]), timeout=5))
            return got, tap.response_flags()
        finally:
            tap.close()

    assert same(setup, scenario, compression=grpc.Compression.Gzip) == ([BODY, BODY], [[1, 0]])
