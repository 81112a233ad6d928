"""Differential tests: metadata as only grpc.aio shows it (with
context.write(), after abort(), of the wrong type), grpc.aio.server()
against pygrpc_native.aio.server(). The scenarios both kinds of server
share are in test_diff_metadata.py.

Metadata is compared grouped by key (tests/diff/aio_harness.py): the order
across different keys is a known difference in both directions — grpc-go
keeps metadata in a map — and the test_known_difference_* tests below show
it explicitly.
"""

import grpc
import grpc.aio
import pytest

from diff import TRANSPORT
from diff.aio_harness import (
    both,
    call_stream,
    call_unary,
    describe,
    method,
    raw_call_unary,
    same,
    setup_handlers,
    unary,
)
from diff.flavours import ASYNCIO, record_outcome

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


# -- initial metadata -------------------------------------------------------------


def test_send_initial_metadata_write_style():
    async def writer(req, ctx):
        await ctx.send_initial_metadata((("x-init", "write"),))
        await ctx.write(b"a")

    ref = ASYNCIO.stream_case(writer)
    assert ref.initial_metadata == (("x-init", "write"),) and ref.responses == (b"a",)


def test_send_initial_metadata_after_write():
    async def handler(req, ctx, state):
        await ctx.write(b"first")
        await record_outcome(state, "seen", ctx.send_initial_metadata((("x-late", "1"),)))
        if False:  # noqa: SIM108 - an async generator that yields nothing
            yield

    same(
        ASYNCIO.recording("S", handler, streaming=True),
        lambda run: (call_stream(run.channel, method("S")), run.state.wait_for("seen")),
    )


def test_send_initial_metadata_after_abort():
    async def handler(req, ctx, state):
        try:
            await ctx.abort(SC.NOT_FOUND, "gone")
        except grpc.aio.AbortError:
            pass
        await record_outcome(state, "seen", ctx.send_initial_metadata((("x-late", "1"),)))

    same(ASYNCIO.recording("M", handler), lambda run: (call_unary(run.channel, method("M")), run.state.wait_for("seen")))


# -- trailing metadata ------------------------------------------------------------

def test_set_trailing_metadata_after_write():
    trailers = (("x-trail", "1"), ("x-trail", "2"), ("x-trail-bin", b"\x00\xff"))

    async def writer(req, ctx):
        await ctx.write(b"a")
        ctx.set_trailing_metadata(trailers)

    ref = ASYNCIO.stream_case(writer)
    assert ref.trailing_metadata == trailers


# -- response metadata order: a known difference -----------------------------------

_MANY = tuple((f"x-{name}", str(i)) for i, name in enumerate(["zeta", "alpha", "mid", "beta", "omega", "delta"]))


def _order_scenario(where):
    async def handler(req, ctx):
        if where == "initial":
            await ctx.send_initial_metadata(_MANY)
        else:
            ctx.set_trailing_metadata(_MANY)
        return b""

    setup = setup_handlers({"M": unary(handler)})

    def scenario(run):
        # Several calls: an order that changes call to call shows as a set of orders.
        orders = set()
        for _ in range(8):
            out = raw_call_unary(run.channel, method("M"))
            md = out.initial_metadata if where == "initial" else out.trailing_metadata
            orders.add(tuple(k for k, _ in md))
        return orders

    return setup, scenario


@pytest.mark.parametrize("where", ["initial", "trailing"])
def test_known_difference_response_metadata_order_across_keys(where):
    """Known difference: grpc.aio sends response metadata in the order the
    handler gave it; pygrpc_native (grpc-go keeps metadata in a map) sends
    the keys in no fixed order. The pairs themselves are the same (every
    other test compares them grouped by key)."""
    setup, scenario = _order_scenario(where)
    ref, ours = both(setup, scenario)
    keys = tuple(k for k, _ in _MANY)
    assert ref == {keys}
    if TRANSPORT == "h2":
        assert ours == ref  # the front's own transport keeps the order
        return
    assert all(sorted(order) == sorted(keys) for order in ours)
    assert ours != {keys}


def test_response_metadata_values_of_one_key_keep_their_order():
    values = [str(i) for i in range(8)]

    async def handler(req, ctx):
        await ctx.send_initial_metadata(tuple(("x-multi", v) for v in values))
        ctx.set_trailing_metadata(tuple(("x-multi", v) for v in reversed(values)))
        return b""

    def scenario(run):
        out = raw_call_unary(run.channel, method("M"))
        return [v for _, v in out.initial_metadata], [v for _, v in out.trailing_metadata]

    assert same(setup_handlers({"M": unary(handler)}), scenario) == (values, values[::-1])


_WRONG_TRAILING_METADATA = {
    "int": 42,
    "None": None,
    "str": "x-key",
    "dict": {"x-key": "v"},
    "bytes-key": ((b"x-key", "v"),),
    "int-value": (("x-key", 1),),
    "list-item": (["x-key", "v"],),
}


@pytest.mark.parametrize("via", ["set_trailing_metadata", "abort", "sync-handler"])
@pytest.mark.parametrize("case", sorted(_WRONG_TRAILING_METADATA))
def test_trailing_metadata_of_the_wrong_type(case, via):
    # grpc.aio raises TypeError in set_trailing_metadata() (and abort())
    # itself; the handler's outcome follows from the exception.
    value = _WRONG_TRAILING_METADATA[case]

    def record(state, set_it):
        try:
            set_it()
            state.record("seen", "no error")
        except Exception as exc:  # noqa: BLE001
            state.record("seen", describe(exc))
            raise

    async def handler(req, ctx, state):
        if via == "abort":
            try:
                await ctx.abort(SC.NOT_FOUND, "nf", value)
            except Exception as exc:  # noqa: BLE001
                state.record("seen", describe(exc))
                raise
        record(state, lambda: ctx.set_trailing_metadata(value))
        return b"resp"

    def sync_setup(server, state):
        def sync_handler(req, ctx):
            record(state, lambda: ctx.set_trailing_metadata(value))
            return b"resp"

        setup_handlers({"M": unary(sync_handler)})(server, state)

    def scenario(run):
        out = call_unary(run.channel, method("M"), timeout=2)
        return out.code, run.state.wait_for("seen", 1)

    same(sync_setup if via == "sync-handler" else ASYNCIO.recording("M", handler), scenario)


