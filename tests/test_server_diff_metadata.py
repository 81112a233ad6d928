"""Differential tests: initial, trailing and invocation metadata, plus the
documented metadata differences of pygrpc_native.server() (each shown
explicitly)."""

import grpc
import pytest

from diff.harness import SERVICE, both, call_stream, call_unary, method, same, setup_handlers, stream, unary

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


def _unary_case(fn, request=b"req", metadata=None):
    setup = setup_handlers({"M": unary(fn)})
    return same(setup, lambda run: call_unary(run.channel, method("M"), request, metadata=metadata))


def _stream_case(fn, request=b"req", metadata=None):
    setup = setup_handlers({"S": stream(fn)})
    return same(setup, lambda run: call_stream(run.channel, method("S"), request, metadata=metadata))


def _describe(exc):
    return f"{type(exc).__name__}: {exc}"


# -- initial metadata -------------------------------------------------------------


def test_send_initial_metadata_unary():
    def handler(req, ctx):
        ctx.send_initial_metadata((("x-init", "v1"), ("x-init-bin", b"\x00\xff\x10")))
        return b"resp"

    ref = _unary_case(handler)
    assert ref.initial_metadata == (("x-init", "v1"), ("x-init-bin", b"\x00\xff\x10"))


def test_send_initial_metadata_stream():
    def handler(req, ctx):
        ctx.send_initial_metadata((("x-init", "s"),))
        yield b"a"
        yield b"b"

    ref = _stream_case(handler)
    assert ref.initial_metadata == (("x-init", "s"),) and ref.responses == (b"a", b"b")


def test_send_initial_metadata_twice_raises():
    # What the handler sees on the second call goes back in trailing metadata.
    def handler(req, ctx):
        ctx.send_initial_metadata((("x-first", "1"),))
        try:
            ctx.send_initial_metadata((("x-second", "2"),))
            seen = "no error"
        except Exception as exc:  # noqa: BLE001
            seen = _describe(exc)
        ctx.set_trailing_metadata((("seen", seen),))
        return b"resp"

    ref = _unary_case(handler)
    assert ("seen", "ValueError: Initial metadata no longer allowed!") in ref.trailing_metadata
    assert ref.initial_metadata == (("x-first", "1"),)


def test_send_initial_metadata_after_first_message_raises():
    def handler(req, ctx):
        yield b"first"
        try:
            ctx.send_initial_metadata((("x-late", "1"),))
            seen = "no error"
        except Exception as exc:  # noqa: BLE001
            seen = _describe(exc)
        ctx.set_trailing_metadata((("seen", seen),))
        yield b"second"

    ref = _stream_case(handler)
    assert ("seen", "ValueError: Initial metadata no longer allowed!") in ref.trailing_metadata


def test_send_initial_metadata_empty():
    def handler(req, ctx):
        ctx.send_initial_metadata(())
        return b"resp"

    _unary_case(handler)


def test_send_initial_metadata_then_abort_in_stream():
    # For server-streaming calls the metadata stays initial metadata (the
    # known difference is only for unary handlers).
    def handler(req, ctx):
        ctx.send_initial_metadata((("x-init", "s"),))
        yield b"one"
        ctx.abort(SC.INTERNAL, "after one")

    ref = _stream_case(handler)
    assert ref.initial_metadata == (("x-init", "s"),)


def test_send_initial_metadata_then_abort_in_stream_before_messages():
    def handler(req, ctx):
        ctx.send_initial_metadata((("x-init", "s"),))
        ctx.abort(SC.INTERNAL, "before any message")
        yield b"never"  # noqa: unreachable - a generator

    ref = _stream_case(handler)
    assert ref.initial_metadata == (("x-init", "s"),)


@pytest.mark.parametrize("failure", ["abort", "exception"])
def test_unary_initial_metadata_then_failure(failure):
    """The README lists a known difference here (the metadata going out with
    the status, so the client sees it as trailing metadata), but measured,
    pygrpc_native keeps it initial metadata, as grpcio does."""

    def handler(req, ctx):
        ctx.send_initial_metadata((("x-init", "v"),))
        if failure == "abort":
            ctx.abort(SC.NOT_FOUND, "gone")
        raise ValueError("failed after metadata")

    ref = _unary_case(handler)
    assert ref.initial_metadata == (("x-init", "v"),) and ref.trailing_metadata == ()


def test_initial_metadata_order_preserved():
    """grpcio keeps the order the handler gave; ours keeps it within each
    key only (README, known differences), which the comparison allows."""
    md = tuple((f"x-{name}", str(i)) for i, name in enumerate(["zeta", "alpha", "mid", "beta", "omega", "delta"]))

    def handler(req, ctx):
        ctx.send_initial_metadata(md)
        return b""

    ref = _unary_case(handler)
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
    for got in (ours.initial_metadata, ours.trailing_metadata):
        assert sorted(got) == sorted(md)
        for key in ("x-a", "x-b"):
            assert [v for k, v in got if k == key] == [v for k, v in md if k == key]


# -- trailing metadata ------------------------------------------------------------

_TRAILERS = (
    ("x-trail", "plain value"),
    ("x-trail-bin", b"\x00\x01\xfe\xff"),
    ("x-trail", "second value"),
    ("x-empty", ""),
    ("x-spaces", "a  b"),
)


def test_set_trailing_metadata_ok():
    def handler(req, ctx):
        ctx.set_trailing_metadata(_TRAILERS)
        return b"resp"

    ref = _unary_case(handler)
    assert ref.code == SC.OK


def test_set_trailing_metadata_with_abort():
    def handler(req, ctx):
        ctx.set_trailing_metadata(_TRAILERS)
        ctx.abort(SC.UNAUTHENTICATED, "who are you")

    ref = _unary_case(handler)
    assert ref.code == SC.UNAUTHENTICATED


def test_set_trailing_metadata_with_exception():
    def handler(req, ctx):
        ctx.set_trailing_metadata((("x-t", "1"),))
        raise ValueError("boom")

    _unary_case(handler)


def test_set_trailing_metadata_stream():
    def handler(req, ctx):
        ctx.set_trailing_metadata(_TRAILERS)
        yield b"a"

    _stream_case(handler)


def test_set_trailing_metadata_twice_last_wins():
    def handler(req, ctx):
        ctx.set_trailing_metadata((("x-a", "1"),))
        ctx.set_trailing_metadata((("x-b", "2"),))
        return b""

    ref = _unary_case(handler)
    assert ref.trailing_metadata == (("x-b", "2"),)


def test_trailing_metadata_getter():
    # Answers in the message: trailing metadata order is compared elsewhere.
    def handler(req, ctx):
        before = ctx.trailing_metadata()
        ctx.set_trailing_metadata((("x-a", "1"), ("x-b-bin", b"\x00")))
        got = ctx.trailing_metadata()
        return repr((before, type(got).__name__, tuple(tuple(m) for m in got))).encode()

    setup = setup_handlers({"M": unary(handler)})
    ref = same(setup, lambda run: call_unary(run.channel, method("M")).responses)
    assert ref == (b"(None, 'tuple', (('x-a', '1'), ('x-b-bin', b'\\x00')))",)


def test_set_trailing_metadata_with_none_response():
    def handler(req, ctx):
        ctx.set_trailing_metadata((("x-a", "1"),))

    ref = _unary_case(handler)
    assert ref.code == SC.INTERNAL


def test_initial_and_trailing_metadata_together():
    def handler(req, ctx):
        ctx.send_initial_metadata((("x-i", "1"),))
        ctx.set_trailing_metadata((("x-t", "2"),))
        return b"r"

    ref = _unary_case(handler)
    assert ref.initial_metadata == (("x-i", "1"),) and ref.trailing_metadata == (("x-t", "2"),)


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


def _echo_invocation_metadata(req, ctx):
    """Answers with what invocation_metadata() returned: compared as a
    multiset, since request metadata order is a known difference."""
    md = ctx.invocation_metadata()
    shapes = {(isinstance(m, tuple), len(m), hasattr(m, "key"), hasattr(m, "value")) for m in md}
    as_pairs = [(m.key, m.value) for m in md]
    seen = (type(md).__name__, sorted(shapes), sorted(as_pairs, key=repr))
    return repr(seen).encode()


def test_invocation_metadata_as_multiset():
    ref = _unary_case(_echo_invocation_metadata, metadata=_REQUEST_MD)
    seen = ref.responses[0].decode()
    assert "x-data-bin" in seen and "Bearer abc" in seen and "user-agent" in seen


def test_invocation_metadata_stream():
    def handler(req, ctx):
        yield _echo_invocation_metadata(req, ctx)

    _stream_case(handler, metadata=_REQUEST_MD)


def test_invocation_metadata_without_client_metadata():
    _unary_case(_echo_invocation_metadata)


def test_invocation_metadata_with_timeout_leaves_out_grpc_keys():
    def scenario(run):
        out = call_unary(run.channel, method("M"), b"", metadata=(("x-a", "1"),), timeout=30)
        return out

    ref = same(setup_handlers({"M": unary(_echo_invocation_metadata)}), scenario)
    assert b"grpc-timeout" not in ref.responses[0]


def test_invocation_metadata_repeated_key_keeps_value_order():
    def handler(req, ctx):
        values = [m.value for m in ctx.invocation_metadata() if m.key == "x-multi"]
        ctx.set_trailing_metadata((("values", ",".join(values)),))
        return b""

    ref = _unary_case(handler, metadata=(("x-multi", "c"), ("x-other", "o"), ("x-multi", "a"), ("x-multi", "b")))
    assert ("values", "c,a,b") in ref.trailing_metadata


def test_known_difference_request_metadata_order():
    """Known difference: grpc-go keeps request metadata in a map, so
    invocation_metadata() comes back sorted by key; grpcio keeps the order
    the client sent."""

    def handler(req, ctx):
        keys = [m.key for m in ctx.invocation_metadata() if m.key.startswith("x-")]
        ctx.set_trailing_metadata((("keys", ",".join(keys)),))
        return b""

    setup = setup_handlers({"M": unary(handler)})
    md = (("x-zeta", "1"), ("x-alpha", "2"), ("x-mid", "3"))
    ref, ours = both(setup, lambda run: call_unary(run.channel, method("M"), b"", metadata=md))
    assert ref.code == ours.code == SC.OK
    assert dict(ref.trailing_metadata)["keys"] == "x-zeta,x-alpha,x-mid"
    assert dict(ours.trailing_metadata)["keys"] == "x-alpha,x-mid,x-zeta"


# -- documented response-metadata differences --------------------------------------


def test_known_difference_reserved_grpc_key_in_response_metadata():
    """Known difference: response metadata keys starting with grpc- are
    reserved; pygrpc_native ends the call with INTERNAL, grpcio sends them."""

    def handler(req, ctx):
        ctx.set_trailing_metadata((("grpc-custom", "v"),))
        return b"resp"

    setup = setup_handlers({"M": unary(handler)})
    ref, ours = both(setup, lambda run: call_unary(run.channel, method("M"), b""))
    assert ref.code == SC.OK and ref.responses == (b"resp",)
    assert ours.code == SC.INTERNAL


def test_metadata_keys_given_as_bytes():
    # grpcio takes bytes keys as well as str ones, in both directions.
    def handler(req, ctx):
        ctx.send_initial_metadata(((b"x-init", "i"), (b"x-init-bin", b"\x00\x01")))
        ctx.set_trailing_metadata(((b"x-trail", b"t"), ("x-str", "s")))
        return b"resp"

    ref = _unary_case(handler)
    assert ref.initial_metadata == (("x-init", "i"), ("x-init-bin", b"\x00\x01"))
    assert sorted(ref.trailing_metadata) == [("x-str", "s"), ("x-trail", "t")]


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
    """The README lists "a non-ASCII value on a key without -bin is sent as
    is" as a known difference, but measured, pygrpc_native refuses it with
    INTERNAL as grpcio does; so this is compared like any other outcome."""

    def handler(req, ctx):
        if where == "initial":
            ctx.send_initial_metadata(((key, value),))
        else:
            ctx.set_trailing_metadata(((key, value),))
        return b"resp"

    ref = _unary_case(handler)
    assert ref.code == SC.INTERNAL
