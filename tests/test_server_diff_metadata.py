"""Differential tests: metadata as only the sync servers show it (the order
of response metadata across keys as the comparison allows it, bytes keys in
trailing metadata, a plain generator aborting), grpc.server() against
pygrpc_native.server(). The scenarios both kinds of server share are in
test_diff_metadata.py."""

import grpc
import pytest

from diff import TRANSPORT
from diff.flavours import SYNC
from diff.harness import SERVICE, both, call_unary, method, same, unary

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


def test_send_initial_metadata_then_abort_in_stream_before_messages():
    def handler(req, ctx):
        ctx.send_initial_metadata((("x-init", "s"),))
        ctx.abort(SC.INTERNAL, "before any message")
        yield b"never"  # noqa: unreachable - a generator

    ref = SYNC.stream_case(handler)
    assert ref.initial_metadata == (("x-init", "s"),)


def test_initial_metadata_order_preserved():
    """grpcio keeps the order the handler gave; ours keeps it within each
    key only (README, known differences), which the comparison allows."""
    md = tuple((f"x-{name}", str(i)) for i, name in enumerate(["zeta", "alpha", "mid", "beta", "omega", "delta"]))

    def handler(req, ctx):
        ctx.send_initial_metadata(md)
        return b""

    ref = SYNC.unary_case(handler)
    assert ref.initial_metadata == md


def test_known_difference_response_metadata_order_across_keys():
    """README, known differences: response metadata reaches the client
    grouped by key in an order grpc-go picks; the values of one key keep
    their order."""
    md = (("x-b", "1"), ("x-a", "2"), ("x-b", "3"), ("x-c", "4"), ("x-a", "5"))

    def setup(server, state):
        def handler(req, ctx):
            ctx.send_initial_metadata(md)
            ctx.set_trailing_metadata(md)
            return b""

        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"M": unary(handler)}),))

    def scenario(run):
        return call_unary(run.channel, method("M"), b"")

    ref, ours = both(setup, scenario)
    assert ref.initial_metadata == md and ref.trailing_metadata == md
    if TRANSPORT == "h2":  # the front's own transport keeps the order
        assert (ours.initial_metadata, ours.trailing_metadata) == (md, md)
    for got in (ours.initial_metadata, ours.trailing_metadata):
        assert sorted(got) == sorted(md)
        for key in ("x-a", "x-b"):
            assert [v for k, v in got if k == key] == [v for k, v in md if k == key]


@pytest.mark.parametrize("bad", [("Abc", "v"), ("a b", "v"), ("x-u", "caf\u00e9")])
def test_initial_metadata_gRPC_cannot_carry_returns(bad):
    """send_initial_metadata() with a key that isn't a header name or a
    value that isn't printable ASCII returns, and the handler runs on; the
    call ends INTERNAL "Invalid metadata" (ours raised ValueError into the
    handler)."""

    def setup(server, state):
        def handler(req, ctx):
            state.record("returned", ctx.send_initial_metadata((bad,)))
            return b"resp"

        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"M": unary(handler)}),))

    def scenario(run):
        return call_unary(run.channel, method("M"), b"").brief(), run.state.wait_for("returned")

    assert same(setup, scenario) == ((SC.INTERNAL, "Invalid metadata"), None)


def test_trailing_metadata_keys_given_as_bytes():
    # The sync server takes bytes keys (and values) in trailing metadata as
    # well as str ones; grpc.aio refuses them (test_aio_diff_metadata.py).
    def handler(req, ctx):
        ctx.set_trailing_metadata(((b"x-trail", b"t"), ("x-str", "s")))
        return b"resp"

    ref = SYNC.unary_case(handler)
    assert sorted(ref.trailing_metadata) == [("x-str", "s"), ("x-trail", "t")]
