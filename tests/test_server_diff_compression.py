"""Differential tests: response compression as only the sync servers show
it (a client that accepts no compression, a compressed request meeting
disable_next_message_compression(), a bidi handler on the fallback),
grpc.server() against pygrpc_native.server(), read off the wire
(tests/diff/compression.py). The scenarios both kinds of server share are in
test_diff_compression.py.
"""

import grpc
import pytest

from diff import TRANSPORT
from diff.compression import BODY, calls, on_wire
from diff.harness import both, method, same, setup_handlers, unary
from h2_raw import RawH2, grpc_message, request_headers

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


def test_client_that_accepts_no_compression():
    """Known difference (README): grpc-go compresses only with an algorithm
    the client advertised; grpc-core compresses anyway, and such a grpcio
    client then fails the call."""

    def drive(channel):
        try:
            return channel.unary_unary(method("Echo"))(BODY, timeout=5)
        except grpc.RpcError as err:
            return err.code()

    setup = setup_handlers({"Echo": unary(lambda req, ctx: req)})
    options = [("grpc.compression_enabled_algorithms_bitset", 1)]  # identity only
    ref, ours = both(setup, on_wire(drive, options=options), compression=grpc.Compression.Gzip)
    assert ref == (SC.INTERNAL, [[1]])
    assert ours == (BODY, [[0]])


def test_disable_next_message_compression_after_a_compressed_request():
    """Known difference (README): grpc-go keeps compressing that message."""

    def uncompressed(req, ctx):
        ctx.disable_next_message_compression()
        return req

    setup = setup_handlers({"Uncompressed": unary(uncompressed)})
    scenario = on_wire(calls([("Uncompressed", False)]), grpc.Compression.Gzip)
    ref, ours = both(setup, scenario, compression=grpc.Compression.Gzip)
    assert ref == ([BODY], [[0]])
    if TRANSPORT == "h2":
        assert ours == ref  # the front's own transport has a per-message flag
    else:
        assert ours == ([BODY], [[1]])


def test_disable_next_message_compression_in_a_bidi_handler():
    """In request-stream handlers (here bidi) too."""

    def chat(requests, ctx):
        for i, request in enumerate(requests):
            if i == 1:
                ctx.disable_next_message_compression()
            yield request

    setup = setup_handlers({"Chat": grpc.stream_stream_rpc_method_handler(chat)})
    scenario = on_wire(lambda channel: list(channel.stream_stream(method("Chat"))(iter([BODY, BODY]), timeout=5)))
    assert same(setup, scenario, compression=grpc.Compression.Gzip) == ([BODY, BODY], [[1, 0]])


@pytest.mark.parametrize("name", ["zstd", "snappy", "GZIP"])
def test_request_encoding_grpc_core_does_not_know(name):
    """A request compressed with an encoding grpc-core doesn't know (a
    grpc-go or grpc-java client set up with zstd or snappy): grpcio answers
    INTERNAL "Error parsing 'grpc-encoding' metadata" (ours answered
    grpc-go's UNIMPLEMENTED, which its transport still answers)."""

    def scenario(run):
        with RawH2(run.port) as conn:
            conn.headers(1, request_headers(method("Echo"), extra=[("grpc-encoding", name)]))
            conn.data(1, grpc_message(b"x", compressed=True))
            frames = conn.collect(lambda fs: bool(fs) and fs[-1].stream_id == 1 and (fs[-1].end_stream or fs[-1].kind == "rst"))
        end = frames[-1]
        return end.headers.get("grpc-status"), end.headers.get("grpc-message")

    ref, ours = both(setup_handlers({"Echo": unary(lambda req, ctx: req)}), scenario)
    assert ref == (str(SC.INTERNAL.value[0]), "Error parsing 'grpc-encoding' metadata")
    assert ours == ref if TRANSPORT == "h2" else ours[0] == str(SC.UNIMPLEMENTED.value[0])
