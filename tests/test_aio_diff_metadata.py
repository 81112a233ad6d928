"""Differential tests: initial, trailing and invocation metadata with
coroutine handlers, grpc.aio.server() against pygrpc_native.aio.server().

Metadata is compared grouped by key (tests/diff/aio_harness.py): the order
across different keys is a known difference in both directions — grpc-go
keeps metadata in a map — and the test_known_difference_* tests below show
it explicitly.
"""

import collections

import grpc
import grpc.aio
import pytest

from diff.aio_harness import (
    both,
    call_stream,
    call_unary,
    describe,
    method,
    raw_call_unary,
    same,
    setup_handlers,
    stream,
    unary,
)

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


def _unary_case(fn, request=b"req", metadata=None):
    setup = setup_handlers({"M": unary(fn)})
    return same(setup, lambda run: call_unary(run.channel, method("M"), request, metadata=metadata))


def _stream_case(fn, request=b"req", metadata=None):
    setup = setup_handlers({"S": stream(fn)})
    return same(setup, lambda run: call_stream(run.channel, method("S"), request, metadata=metadata))


def _recording(name, fn, streaming=False):
    """A setup whose handler fn(req, ctx, state) is a coroutine (or an async
    generator when streaming)."""

    def setup(server, state):
        if streaming:

            async def handler(req, ctx):
                async for item in fn(req, ctx, state):
                    yield item

            setup_handlers({name: stream(handler)})(server, state)
        else:

            async def handler(req, ctx):
                return await fn(req, ctx, state)

            setup_handlers({name: unary(handler)})(server, state)

    return setup


# -- initial metadata -------------------------------------------------------------


def test_send_initial_metadata_unary():
    async def handler(req, ctx):
        await ctx.send_initial_metadata((("x-init", "v1"), ("x-init-bin", b"\x00\xff\x10")))
        return b"resp"

    ref = _unary_case(handler)
    assert ref.initial_metadata == (("x-init", "v1"), ("x-init-bin", b"\x00\xff\x10")) and ref.responses == (b"resp",)


def test_send_initial_metadata_async_generator_and_write():
    async def agen(req, ctx):
        await ctx.send_initial_metadata((("x-init", "gen"),))
        yield b"a"
        yield b"b"

    async def writer(req, ctx):
        await ctx.send_initial_metadata((("x-init", "write"),))
        await ctx.write(b"a")

    setup = setup_handlers({"G": stream(agen), "W": stream(writer)})
    ref = same(setup, lambda run: (call_stream(run.channel, method("G")), call_stream(run.channel, method("W"))))
    assert ref[0].initial_metadata == (("x-init", "gen"),) and ref[1].initial_metadata == (("x-init", "write"),)


def test_send_initial_metadata_twice_raises_usage_error():
    async def handler(req, ctx, state):
        await ctx.send_initial_metadata((("x-first", "1"),))
        try:
            await ctx.send_initial_metadata((("x-second", "2"),))
            state.record("seen", "no error")
        except Exception as exc:  # noqa: BLE001
            state.record("seen", describe(exc))
        return b"resp"

    ref = same(
        _recording("M", handler),
        lambda run: (call_unary(run.channel, method("M")), run.state.wait_for("seen")),
    )
    assert ref[0].initial_metadata == (("x-first", "1"),)
    assert ref[1].endswith("UsageError: Send initial metadata failed: already sent")


def test_send_initial_metadata_after_first_message():
    async def handler(req, ctx, state):
        yield b"first"
        try:
            await ctx.send_initial_metadata((("x-late", "1"),))
            state.record("seen", "no error")
        except Exception as exc:  # noqa: BLE001
            state.record("seen", describe(exc))
        yield b"second"

    same(
        _recording("S", handler, streaming=True),
        lambda run: (call_stream(run.channel, method("S")), run.state.wait_for("seen")),
    )


def test_send_initial_metadata_after_write():
    async def handler(req, ctx, state):
        await ctx.write(b"first")
        try:
            await ctx.send_initial_metadata((("x-late", "1"),))
            state.record("seen", "no error")
        except Exception as exc:  # noqa: BLE001
            state.record("seen", describe(exc))
        if False:  # noqa: SIM108 - an async generator that yields nothing
            yield

    same(
        _recording("S", handler, streaming=True),
        lambda run: (call_stream(run.channel, method("S")), run.state.wait_for("seen")),
    )


def test_send_initial_metadata_empty():
    async def handler(req, ctx):
        await ctx.send_initial_metadata(())
        return b"resp"

    _unary_case(handler)


def test_send_initial_metadata_then_abort_in_stream():
    async def handler(req, ctx):
        await ctx.send_initial_metadata((("x-init", "s"),))
        yield b"one"
        await ctx.abort(SC.INTERNAL, "after one")

    ref = _stream_case(handler)
    assert ref.initial_metadata == (("x-init", "s"),) and ref.brief() == (SC.INTERNAL, "after one")


@pytest.mark.parametrize("failure", ["abort", "exception"])
def test_unary_initial_metadata_then_failure(failure):
    async def handler(req, ctx):
        await ctx.send_initial_metadata((("x-init", "v"),))
        if failure == "abort":
            await ctx.abort(SC.NOT_FOUND, "gone")
        raise ValueError("failed after metadata")

    _unary_case(handler)


def test_send_initial_metadata_after_abort():
    async def handler(req, ctx, state):
        try:
            await ctx.abort(SC.NOT_FOUND, "gone")
        except grpc.aio.AbortError:
            pass
        try:
            await ctx.send_initial_metadata((("x-late", "1"),))
            state.record("seen", "no error")
        except Exception as exc:  # noqa: BLE001
            state.record("seen", describe(exc))

    same(_recording("M", handler), lambda run: (call_unary(run.channel, method("M")), run.state.wait_for("seen")))


# -- trailing metadata ------------------------------------------------------------

_TRAILERS = (
    ("x-trail", "plain value"),
    ("x-trail-bin", b"\x00\x01\xfe\xff"),
    ("x-trail", "second value"),
    ("x-empty", ""),
    ("x-spaces", "a  b"),
)


def test_set_trailing_metadata_ok():
    async def handler(req, ctx):
        ctx.set_trailing_metadata(_TRAILERS)
        return b"resp"

    ref = _unary_case(handler)
    assert ref.code == SC.OK
    assert [v for k, v in ref.trailing_metadata if k == "x-trail"] == ["plain value", "second value"]
    assert ("x-trail-bin", b"\x00\x01\xfe\xff") in ref.trailing_metadata


def test_set_trailing_metadata_with_abort_and_exception():
    async def aborting(req, ctx):
        ctx.set_trailing_metadata(_TRAILERS)
        await ctx.abort(SC.UNAUTHENTICATED, "who are you")

    async def failing(req, ctx):
        ctx.set_trailing_metadata((("x-t", "1"), ("x-t-bin", b"\x01")))
        raise ValueError("boom")

    setup = setup_handlers({"A": unary(aborting), "F": unary(failing)})
    ref = same(setup, lambda run: (call_unary(run.channel, method("A")), call_unary(run.channel, method("F"))))
    assert ref[0].code == SC.UNAUTHENTICATED and ref[1].code == SC.UNKNOWN


def test_set_trailing_metadata_stream():
    async def agen(req, ctx):
        ctx.set_trailing_metadata(_TRAILERS)
        yield b"a"

    async def writer(req, ctx):
        await ctx.write(b"a")
        ctx.set_trailing_metadata(_TRAILERS)

    setup = setup_handlers({"G": stream(agen), "W": stream(writer)})
    ref = same(setup, lambda run: (call_stream(run.channel, method("G")), call_stream(run.channel, method("W"))))
    assert ref[0].trailing_metadata == ref[1].trailing_metadata != ()


def test_set_trailing_metadata_twice_last_wins():
    async def handler(req, ctx):
        ctx.set_trailing_metadata((("x-a", "1"),))
        ctx.set_trailing_metadata((("x-b", "2"),))
        return b""

    ref = _unary_case(handler)
    assert ref.trailing_metadata == (("x-b", "2"),)


def test_trailing_metadata_getter():
    async def handler(req, ctx, state):
        before = ctx.trailing_metadata()
        ctx.set_trailing_metadata((("x-a", "1"), ("x-b-bin", b"\x00")))
        got = ctx.trailing_metadata()
        state.record("getter", (before, type(got).__name__, tuple(tuple(m) for m in got)))
        return b""

    ref = same(_recording("M", handler), lambda run: (call_unary(run.channel, method("M")), run.state.wait_for("getter")))
    assert ref[1][2] == (("x-a", "1"), ("x-b-bin", b"\x00"))


def test_set_trailing_metadata_with_none_response():
    async def handler(req, ctx):
        ctx.set_trailing_metadata((("x-a", "1"),))

    ref = _unary_case(handler)
    assert ref.code == SC.OK and ref.trailing_metadata == (("x-a", "1"),)


def test_initial_and_trailing_metadata_together():
    async def handler(req, ctx):
        await ctx.send_initial_metadata((("x-i", "1"),))
        ctx.set_trailing_metadata((("x-t", "2"),))
        return b"r"

    ref = _unary_case(handler)
    assert ref.initial_metadata == (("x-i", "1"),) and ref.trailing_metadata == (("x-t", "2"),)


def test_known_difference_reserved_grpc_key_in_response_metadata():
    """Known difference (README): response metadata keys starting with grpc-
    are reserved; pygrpc_native ends the call with INTERNAL, grpc.aio sends them."""

    async def handler(req, ctx):
        ctx.set_trailing_metadata((("grpc-custom", "v"),))
        return b"resp"

    ref, ours = both(setup_handlers({"M": unary(handler)}), lambda run: call_unary(run.channel, method("M")))
    assert ref.code == SC.OK and ref.responses == (b"resp",)
    assert ours.code == SC.INTERNAL


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


# -- invocation metadata ------------------------------------------------------------

_REQUEST_MD = (
    ("x-zeta", "last"),
    ("x-alpha", "first"),
    ("x-multi", "1"),
    ("x-data-bin", b"\x00\x01\x02\xff"),
    ("x-multi", "2"),
    ("authorization", "Bearer abc"),
    ("x-unicode-bin", "ü".encode("utf-8")),
)


def _seen_invocation_metadata(ctx):
    """What invocation_metadata() returned, as a multiset (request metadata
    order across keys is a known difference)."""
    md = ctx.invocation_metadata()
    shapes = {(isinstance(m, tuple), len(m), hasattr(m, "key"), hasattr(m, "value")) for m in md}
    pairs = collections.Counter((m.key, m.value) for m in md if m.key != "user-agent")
    agent = [m.value.split(" ")[0] for m in md if m.key == "user-agent"]
    return type(md).__name__, sorted(shapes), sorted(pairs.items(), key=repr), agent


def test_invocation_metadata_as_multiset():
    async def handler(req, ctx, state):
        state.record("seen", _seen_invocation_metadata(ctx))
        return b""

    def scenario(run):
        call_unary(run.channel, method("M"), metadata=_REQUEST_MD)
        return run.state.wait_for("seen")

    ref = same(_recording("M", handler), scenario)
    assert (("x-data-bin", b"\x00\x01\x02\xff"), 1) in ref[2] and (("authorization", "Bearer abc"), 1) in ref[2]


def test_invocation_metadata_stream_and_without_client_metadata():
    async def handler(req, ctx, state):
        state.append("seen", _seen_invocation_metadata(ctx))
        yield b""

    def scenario(run):
        call_stream(run.channel, method("S"), metadata=_REQUEST_MD)
        call_stream(run.channel, method("S"), timeout=30)
        return run.state.wait_for("seen")

    ref = same(_recording("S", handler, streaming=True), scenario)
    assert not any(k.startswith("grpc-") for (k, _), _n in ref[1][2])


def test_invocation_metadata_repeated_key_keeps_value_order():
    async def handler(req, ctx, state):
        state.record("values", [m.value for m in ctx.invocation_metadata() if m.key == "x-multi"])
        return b""

    md = (("x-multi", "c"), ("x-other", "o"), ("x-multi", "a"), ("x-multi", "b"))

    def scenario(run):
        call_unary(run.channel, method("M"), metadata=md)
        return run.state.wait_for("values")

    assert same(_recording("M", handler), scenario) == ["c", "a", "b"]


def test_known_difference_request_metadata_order():
    """Known difference: grpc-go keeps request metadata in a map, so
    invocation_metadata() comes back sorted by key; grpc.aio keeps the order
    the client sent."""

    async def handler(req, ctx, state):
        state.record("keys", [m.key for m in ctx.invocation_metadata() if m.key.startswith("x-")])
        return b""

    md = (("x-zeta", "1"), ("x-alpha", "2"), ("x-mid", "3"))

    def scenario(run):
        call_unary(run.channel, method("M"), metadata=md)
        return run.state.wait_for("keys")

    ref, ours = both(_recording("M", handler), scenario)
    assert ref == ["x-zeta", "x-alpha", "x-mid"]
    assert ours == ["x-alpha", "x-mid", "x-zeta"]


def test_initial_metadata_keys_given_as_bytes():
    # grpc.aio takes bytes keys in initial metadata (not in trailing
    # metadata: see below).
    async def handler(req, ctx):
        await ctx.send_initial_metadata(((b"x-init", "i"), (b"x-init-bin", b"\x00\x01")))
        return b"resp"

    ref = _unary_case(handler)
    assert ref.initial_metadata == (("x-init", "i"), ("x-init-bin", b"\x00\x01"))


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

    same(sync_setup if via == "sync-handler" else _recording("M", handler), scenario)


@pytest.mark.parametrize(
    "where,key,value",
    [
        ("trailing", "x-text", "ünïcode"),
        ("initial", "x-text", "ünïcode"),
        ("trailing", "Upper-Case", "v"),
        ("initial", "bad key", "v"),
    ],
    ids=["non-ascii-trailing", "non-ascii-initial", "uppercase-key-trailing", "space-key-initial"],
)
def test_invalid_response_metadata(where, key, value):
    async def handler(req, ctx):
        if where == "initial":
            await ctx.send_initial_metadata(((key, value),))
        else:
            ctx.set_trailing_metadata(((key, value),))
        return b"resp"

    def scenario(run):
        out = call_unary(run.channel, method("M"), timeout=2)
        return out.code, out.responses

    same(setup_handlers({"M": unary(handler)}), scenario)
