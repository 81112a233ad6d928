"""Differential tests: status codes, details and messages of unary and
server-streaming calls with coroutine handlers, grpc.aio.server() against
pygrpc_native.aio.server() (tests/diff/aio_harness.py).

grpc.aio's outcomes for exceptions ("Unexpected <class '...'>: msg") and for
a unary handler returning None (OK, empty message) are part of the contract,
so the tests pin them too. The representative cases also run on uvloop.
"""

import asyncio

import grpc
import grpc.aio
import pytest

from diff import status_details
from diff.aio_harness import (
    LOOPS,
    both,
    call_stream,
    call_unary,
    describe,
    method,
    same,
    setup_handlers,
    stream,
    unary,
)

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


def _unary_case(fn, request=b"req", loop="asyncio", **handler_kwargs):
    setup = setup_handlers({"M": unary(fn, **handler_kwargs)})
    return same(setup, lambda run: call_unary(run.channel, method("M"), request), loop=loop)


def _stream_case(fn, request=b"req", loop="asyncio", **handler_kwargs):
    setup = setup_handlers({"S": stream(fn, **handler_kwargs)})
    return same(setup, lambda run: call_stream(run.channel, method("S"), request), loop=loop)


# -- success -------------------------------------------------------------------


@pytest.mark.parametrize("loop", LOOPS)
def test_unary_success(loop):
    async def handler(req, ctx):
        await asyncio.sleep(0)
        return b"echo:" + req

    ref = _unary_case(handler, loop=loop)
    assert ref.code == SC.OK and ref.responses == (b"echo:req",)


def test_unary_empty_request_and_response():
    async def handler(req, ctx):
        return b""

    ref = _unary_case(handler, request=b"")
    assert ref.code == SC.OK and ref.responses == (b"",)


@pytest.mark.parametrize("loop", LOOPS)
def test_stream_async_generator(loop):
    async def handler(req, ctx):
        for i in range(5):
            await asyncio.sleep(0)
            yield req + b"%d" % i

    ref = _stream_case(handler, loop=loop)
    assert ref.code == SC.OK and ref.responses == tuple(b"req%d" % i for i in range(5))


@pytest.mark.parametrize("loop", LOOPS)
def test_stream_context_write(loop):
    async def handler(req, ctx):
        for i in range(5):
            await ctx.write(req + b"%d" % i)

    ref = _stream_case(handler, loop=loop)
    assert ref.code == SC.OK and ref.responses == tuple(b"req%d" % i for i in range(5))


def test_stream_context_write_returns_a_value():
    # A write-style handler that also returns something: grpc.aio ignores it.
    async def handler(req, ctx):
        await ctx.write(b"one")
        return b"ignored"

    ref = _stream_case(handler)
    assert ref.code == SC.OK


def test_stream_no_messages():
    async def agen(req, ctx):
        return
        yield  # noqa: unreachable - makes this an async generator

    async def coro(req, ctx):
        return None

    setup = setup_handlers({"A": stream(agen), "C": stream(coro)})
    ref = same(setup, lambda run: (call_stream(run.channel, method("A")), call_stream(run.channel, method("C"))))
    assert ref[0].code == ref[1].code == SC.OK and ref[0].responses == ref[1].responses == ()


def test_stream_yields_none():
    # grpc.aio writes None as an empty message and goes on.
    async def handler(req, ctx):
        yield b"a"
        yield None
        yield b"after none"

    ref = _stream_case(handler)
    assert ref.code == SC.OK and ref.responses == (b"a", b"", b"after none")


def test_stream_writes_none():
    async def handler(req, ctx):
        await ctx.write(b"a")
        await ctx.write(None)
        await ctx.write(b"b")

    ref = _stream_case(handler)
    assert ref.code == SC.OK and ref.responses == (b"a", b"", b"b")


def test_stream_mixes_write_and_yield():
    # An async generator that also calls context.write().
    async def handler(req, ctx):
        await ctx.write(b"written")
        yield b"yielded"

    _stream_case(handler)


def test_known_difference_write_in_unary_handler():
    # README, known differences: context.write() in a unary handler. grpc.aio
    # lets the write through and then never finishes the call: the client's
    # deadline ends it. Ours ends the call at once with INTERNAL, since a
    # unary call answers with exactly one message.
    def setup(server, state):
        async def handler(req, ctx):
            try:
                await ctx.write(b"written")
                seen = "no error"
            except Exception as exc:  # noqa: BLE001
                seen = describe(exc)
            state.record("seen", seen)
            return b"returned"

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        out = call_unary(run.channel, method("M"), timeout=1.0)
        return out.code, out.responses, run.state.wait_for("seen")

    ref, ours = both(setup, scenario)
    assert ref == (SC.DEADLINE_EXCEEDED, (), "no error")
    assert ours == (SC.INTERNAL, (), "no error")


# -- exceptions ----------------------------------------------------------------


def _raise(exc):
    async def handler(req, ctx):
        raise exc

    return handler


@pytest.mark.parametrize("loop", LOOPS)
def test_unary_handler_exception(loop):
    ref = _unary_case(_raise(ValueError("boom")), loop=loop)
    assert ref.brief() == (SC.UNKNOWN, "Unexpected <class 'ValueError'>: boom")


def test_unary_handler_exception_unicode_and_empty_message():
    setup = setup_handlers(
        {"U": unary(_raise(RuntimeError("fehlgeschlagen: ü ✓ 日本"))), "E": unary(_raise(KeyError()))}
    )
    ref = same(setup, lambda run: (call_unary(run.channel, method("U")).brief(), call_unary(run.channel, method("E")).brief()))
    assert ref == (
        (SC.UNKNOWN, "Unexpected <class 'RuntimeError'>: fehlgeschlagen: ü ✓ 日本"),
        (SC.UNKNOWN, "Unexpected <class 'KeyError'>: "),
    )


def test_handler_exception_user_defined_class():
    class MyError(Exception):
        pass

    ref = _unary_case(_raise(MyError("mine")))
    assert ref.code == SC.UNKNOWN and ref.details.endswith("MyError'>: mine")


def test_stream_exception_midway():
    async def handler(req, ctx):
        yield b"one"
        yield b"two"
        raise ValueError("midway")

    ref = _stream_case(handler)
    assert ref.brief() == (SC.UNKNOWN, "Unexpected <class 'ValueError'>: midway")
    assert ref.responses == (b"one", b"two")


def test_stream_write_style_exception_midway():
    async def handler(req, ctx):
        await ctx.write(b"one")
        raise ValueError("midway")

    ref = _stream_case(handler)
    assert ref.brief() == (SC.UNKNOWN, "Unexpected <class 'ValueError'>: midway")
    assert ref.responses == (b"one",)


def test_code_set_before_exception_wins():
    async def handler(req, ctx):
        ctx.set_code(SC.NOT_FOUND)
        raise ValueError("boom")

    ref = _unary_case(handler)
    assert ref.brief() == (SC.NOT_FOUND, "Unexpected <class 'ValueError'>: boom")


def test_details_set_before_exception():
    async def handler(req, ctx):
        ctx.set_details("my details")
        raise ValueError("boom")

    _unary_case(handler)


def test_code_and_details_set_before_exception():
    async def handler(req, ctx):
        ctx.set_code(SC.FAILED_PRECONDITION)
        ctx.set_details("precondition")
        raise ValueError("boom")

    ref = _unary_case(handler)
    assert ref.code == SC.FAILED_PRECONDITION


def test_stream_code_set_before_exception_wins():
    async def handler(req, ctx):
        yield b"a"
        ctx.set_code(SC.DATA_LOSS)
        raise ValueError("gone")

    ref = _stream_case(handler)
    assert ref.brief() == (SC.DATA_LOSS, "Unexpected <class 'ValueError'>: gone")


def test_raised_rpc_error_is_a_handler_exception():
    class Err(grpc.RpcError):
        def __str__(self):
            return "nested rpc failed"

    ref = _unary_case(_raise(Err()))
    assert ref.code == SC.UNKNOWN and ref.details.endswith("Err'>: nested rpc failed")


# -- abort ---------------------------------------------------------------------

_ABORT_CODES = [SC.CANCELLED, SC.INVALID_ARGUMENT, SC.NOT_FOUND, SC.PERMISSION_DENIED, SC.INTERNAL, SC.UNAUTHENTICATED]


@pytest.mark.parametrize("code", _ABORT_CODES, ids=[c.name for c in _ABORT_CODES])
def test_abort_code(code):
    async def handler(req, ctx):
        await ctx.abort(code, f"aborted with {code.name} ü")

    ref = _unary_case(handler)
    assert ref.brief() == (code, f"aborted with {code.name} ü")


@pytest.mark.parametrize("loop", LOOPS)
def test_abort_raises_abort_error(loop):
    # What abort() raised, reported in the abort's own trailing metadata.
    def setup(server, state):
        async def handler(req, ctx):
            try:
                await ctx.abort(SC.NOT_FOUND, "nf")
            except BaseException as exc:
                state.record("raised", (type(exc) is grpc.aio.AbortError, isinstance(exc, Exception)))
                raise
            state.record("raised", "nothing")

        setup_handlers({"M": unary(handler)})(server, state)

    ref = same(setup, lambda run: (call_unary(run.channel, method("M")), run.state.wait_for("raised")), loop=loop)
    assert ref[0].brief() == (SC.NOT_FOUND, "nf") and ref[1] == (True, True)


def test_abort_details_forms():
    details = ["", "tab\there\nnew line", "percent %25 %zz and \x7f", "x" * 2000]

    def make(d):
        async def handler(req, ctx):
            await ctx.abort(SC.INVALID_ARGUMENT, d)

        return handler

    setup = setup_handlers({f"M{i}": unary(make(d)) for i, d in enumerate(details)})
    ref = same(setup, lambda run: [call_unary(run.channel, method(f"M{i}")).brief() for i in range(len(details))])
    assert all(code == SC.INVALID_ARGUMENT for code, _ in ref)


def test_abort_with_trailing_metadata_argument():
    async def handler(req, ctx):
        await ctx.abort(SC.PERMISSION_DENIED, "denied", (("x-why", "policy"), ("x-why-bin", b"\x00\xff")))

    ref = _unary_case(handler)
    assert ref.brief() == (SC.PERMISSION_DENIED, "denied")
    assert sorted(ref.trailing_metadata) == [("x-why", "policy"), ("x-why-bin", b"\x00\xff")]


def test_abort_trailing_metadata_argument_replaces_set_trailing_metadata():
    async def handler(req, ctx):
        ctx.set_trailing_metadata((("x-set", "1"),))
        await ctx.abort(SC.ABORTED, "a", (("x-abort", "2"),))

    _unary_case(handler)


def test_abort_keeps_set_trailing_metadata_without_argument():
    async def handler(req, ctx):
        ctx.set_trailing_metadata((("x-set", "1"),))
        await ctx.abort(SC.ABORTED, "a")

    ref = _unary_case(handler)
    assert ref.trailing_metadata == (("x-set", "1"),)


@pytest.mark.parametrize("where", ["unary", "stream"])
def test_abort_twice_raises_usage_error(where):
    def setup(server, state):
        async def twice(ctx):
            try:
                await ctx.abort(SC.NOT_FOUND, "first")
            except grpc.aio.AbortError:
                pass
            try:
                await ctx.abort(SC.INTERNAL, "second")
                state.record("second", "no error")
            except BaseException as exc:
                state.record("second", describe(exc))
                raise

        async def unary_handler(req, ctx):
            await twice(ctx)

        async def stream_handler(req, ctx):
            await ctx.write(b"one")
            await twice(ctx)

        setup_handlers({"M": unary(unary_handler), "S": stream(stream_handler)})(server, state)

    def scenario(run):
        call = call_unary if where == "unary" else call_stream
        return call(run.channel, method("M" if where == "unary" else "S")), run.state.wait_for("second")

    ref = same(setup, scenario)
    assert ref[0].brief() == (SC.NOT_FOUND, "first")
    assert ref[1] == "grpc._cython.cygrpc.UsageError: Abort already called!"


@pytest.mark.parametrize("loop", LOOPS)
def test_abort_swallowed_then_return(loop):
    # The handler swallows AbortError and returns a response anyway: the
    # abort's status stands.
    async def handler(req, ctx):
        try:
            await ctx.abort(SC.UNAVAILABLE, "swallowed")
        except grpc.aio.AbortError:
            pass
        return b"resp"

    ref = _unary_case(handler, loop=loop)
    assert ref.brief() == (SC.UNAVAILABLE, "swallowed") and ref.responses == ()


def test_abort_swallowed_then_write_in_stream():
    def setup(server, state):
        async def handler(req, ctx):
            await ctx.write(b"before")
            try:
                await ctx.abort(SC.UNAVAILABLE, "swallowed")
            except grpc.aio.AbortError:
                pass
            try:
                await ctx.write(b"after")
                state.record("write after abort", "no error")
            except BaseException as exc:
                state.record("write after abort", describe(exc))
                raise

        setup_handlers({"S": stream(handler)})(server, state)

    ref = same(setup, lambda run: (call_stream(run.channel, method("S")), run.state.wait_for("write after abort")))
    assert ref[0].brief() == (SC.UNAVAILABLE, "swallowed") and ref[0].responses == (b"before",)


def test_abort_then_other_exception():
    async def handler(req, ctx):
        try:
            await ctx.abort(SC.OUT_OF_RANGE, "range")
        except grpc.aio.AbortError:
            raise ValueError("other")

    ref = _unary_case(handler)
    assert ref.brief() == (SC.OUT_OF_RANGE, "range")


def test_abort_in_async_generator_after_messages():
    async def handler(req, ctx):
        yield b"1"
        yield b"2"
        await ctx.abort(SC.ABORTED, "stop here ✋")

    ref = _stream_case(handler)
    assert ref.brief() == (SC.ABORTED, "stop here ✋") and ref.responses == (b"1", b"2")


@pytest.mark.parametrize("loop", LOOPS)
def test_abort_in_write_style_stream(loop):
    async def handler(req, ctx):
        await ctx.write(b"1")
        await ctx.abort(SC.PERMISSION_DENIED, "no more")

    ref = _stream_case(handler, loop=loop)
    assert ref.brief() == (SC.PERMISSION_DENIED, "no more") and ref.responses == (b"1",)


class _Status(grpc.Status):
    def __init__(self, code, details, trailing_metadata):
        self.code = code
        self.details = details
        self.trailing_metadata = trailing_metadata


def test_abort_with_status_plain():
    async def handler(req, ctx):
        await ctx.abort_with_status(_Status(SC.RESOURCE_EXHAUSTED, "quota ü", (("x-retry-after", "10"),)))

    ref = _unary_case(handler)
    assert ref.brief() == (SC.RESOURCE_EXHAUSTED, "quota ü")
    assert ("x-retry-after", "10") in ref.trailing_metadata


@pytest.mark.parametrize("style", ["abort_with_status", "abort"])
def test_rich_error_details(style):
    rpc_status = pytest.importorskip("grpc_status.rpc_status")
    from google.protobuf import any_pb2
    from google.rpc import code_pb2, error_details_pb2, status_pb2

    async def handler(req, ctx):
        detail = any_pb2.Any()
        detail.Pack(
            error_details_pb2.BadRequest(
                field_violations=[error_details_pb2.BadRequest.FieldViolation(field="name", description="empty ✗")]
            )
        )
        status = rpc_status.to_status(
            status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message="invalid name ✗", details=[detail])
        )
        if style == "abort_with_status":
            await ctx.abort_with_status(status)
        else:
            await ctx.abort(status.code, status.details, status.trailing_metadata)

    def scenario(run):
        try:
            run.channel.unary_unary(method("M")).with_call(b"x", timeout=5)
        except grpc.RpcError as err:
            status = rpc_status.from_call(err)
            if status is None:
                return (err.code(), err.details(), tuple(err.trailing_metadata()), None, None, None)
            bad = error_details_pb2.BadRequest()
            status.details[0].Unpack(bad)
            return (
                err.code(),
                err.details(),
                tuple(err.trailing_metadata()),
                status.code,
                status.message,
                [(v.field, v.description) for v in bad.field_violations],
            )
        return "no error"

    ref = same(setup_handlers({"M": unary(handler)}), scenario)
    assert ref[0] == SC.INVALID_ARGUMENT and ref[4] == "invalid name ✗"
    assert ref[5] == [("name", "empty ✗")]


# grpc.aio, too, sends grpc-status-details-bin exactly as the handler set it
# (tests/diff/status_details.py).

@pytest.mark.parametrize("via", ["set_trailing_metadata", "abort"])
@pytest.mark.parametrize("case", sorted(status_details.CASES))
def test_status_details_trailer_is_sent_as_set(case, via):
    trailing, code, details = status_details.CASES[case]()
    if via == "abort" and code is None:
        pytest.skip("abort needs a code other than OK")

    async def handler(req, ctx):
        if via == "abort":
            await ctx.abort(code, details, trailing)
        ctx.set_trailing_metadata(trailing)
        if code is not None:
            ctx.set_code(code)
            ctx.set_details(details)
        return b"r"

    ref = _unary_case(handler)
    assert ref.trailing_metadata == trailing


def test_status_details_in_initial_metadata_are_sent():
    initial = ((status_details.DETAILS_KEY, status_details.status_bytes(3, "bad", True)),)

    async def handler(req, ctx):
        await ctx.send_initial_metadata(initial)
        return b"r"

    assert _unary_case(handler).initial_metadata == initial


def test_known_difference_abort_ok():
    """Known difference (aio/_context.py): ``await context.abort(OK, ...)``.
    grpc.aio leaves such a call unanswered until its deadline passes (the
    client sees DEADLINE_EXCEEDED); pygrpc_native answers UNKNOWN at once,
    as the sync server does."""

    async def handler(req, ctx):
        await ctx.abort(SC.OK, "this is fine")

    setup = setup_handlers({"M": unary(handler)})
    ref, ours = both(setup, lambda run: call_unary(run.channel, method("M"), timeout=1.0))
    assert ref.code == SC.DEADLINE_EXCEEDED
    assert ours.code == SC.UNKNOWN


# -- set_code / set_details with a normal return --------------------------------


def test_set_code_and_details_with_response():
    async def handler(req, ctx):
        ctx.set_code(SC.NOT_FOUND)
        ctx.set_details("not here ü")
        return b"ignored"

    ref = _unary_case(handler)
    assert ref.brief() == (SC.NOT_FOUND, "not here ü") and ref.responses == ()


def test_set_code_only_and_details_only():
    async def code_only(req, ctx):
        ctx.set_code(SC.ALREADY_EXISTS)
        return b"ignored"

    async def details_only(req, ctx):
        ctx.set_details("details but OK")
        return b"resp"

    async def code_ok(req, ctx):
        ctx.set_code(SC.OK)
        return b"resp"

    setup = setup_handlers({"C": unary(code_only), "D": unary(details_only), "O": unary(code_ok)})
    ref = same(setup, lambda run: [call_unary(run.channel, method(m)) for m in "CDO"])
    assert ref[0].code == SC.ALREADY_EXISTS and ref[2].responses == (b"resp",)


def test_set_code_twice_last_wins():
    async def handler(req, ctx):
        ctx.set_code(SC.NOT_FOUND)
        ctx.set_details("first")
        ctx.set_code(SC.ABORTED)
        ctx.set_details("second")
        return b""

    ref = _unary_case(handler)
    assert ref.brief() == (SC.ABORTED, "second")


def test_stream_set_code_after_messages():
    async def handler(req, ctx):
        yield b"a"
        yield b"b"
        ctx.set_code(SC.UNAVAILABLE)
        ctx.set_details("partial")

    ref = _stream_case(handler)
    assert ref.brief() == (SC.UNAVAILABLE, "partial") and ref.responses == (b"a", b"b")


def test_code_and_details_getters():
    def setup(server, state):
        async def handler(req, ctx):
            before = (ctx.code(), ctx.details())
            ctx.set_code(SC.NOT_FOUND)
            ctx.set_details("ü details")
            state.record("getters", (before, (ctx.code(), ctx.details())))
            return b""

        setup_handlers({"M": unary(handler)})(server, state)

    ref = same(setup, lambda run: (call_unary(run.channel, method("M")), run.state.wait_for("getters")))
    assert ref[1][1] == (SC.NOT_FOUND, "ü details")


# -- None responses and (de)serializers -------------------------------------------


@pytest.mark.parametrize("loop", LOOPS)
def test_unary_returns_none(loop):
    # grpc.aio: OK with an empty message (the sync server says INTERNAL).
    async def handler(req, ctx):
        return None

    ref = _unary_case(handler, loop=loop)
    assert ref.code == SC.OK and ref.responses == (b"",)


def test_unary_returns_none_with_code_and_details():
    async def code_only(req, ctx):
        ctx.set_code(SC.NOT_FOUND)

    async def code_and_details(req, ctx):
        ctx.set_code(SC.NOT_FOUND)
        ctx.set_details("nothing")

    setup = setup_handlers({"C": unary(code_only), "D": unary(code_and_details)})
    ref = same(setup, lambda run: [call_unary(run.channel, method(m)).brief() for m in "CD"])
    assert ref[1] == (SC.NOT_FOUND, "nothing")


def test_unary_returns_none_with_serializer():
    # With a response serializer, None goes through it (here: it fails).
    def serialize(obj):
        return obj.encode()

    async def handler(req, ctx):
        return None

    _unary_case(handler, response_serializer=serialize)


def test_unary_serializer_returns_none():
    # A serializer that gives None: grpc.aio sends an empty message, OK.
    async def handler(req, ctx):
        return None

    ref = _unary_case(handler, response_serializer=lambda message: message)
    assert ref.code == SC.OK and ref.responses == (b"",)


def test_failing_request_deserializer():
    def deserialize(data):
        raise ValueError("cannot parse")

    async def handler(req, ctx):
        return req

    async def shandler(req, ctx):
        yield b"x"

    setup = setup_handlers(
        {"M": unary(handler, request_deserializer=deserialize), "S": stream(shandler, request_deserializer=deserialize)}
    )
    ref = same(setup, lambda run: (call_unary(run.channel, method("M")).brief(), call_stream(run.channel, method("S")).brief()))
    assert ref[0][0] == ref[1][0] != SC.OK


def test_failing_response_serializer():
    def serialize(obj):
        if obj == b"bad":
            raise TypeError("cannot serialize")
        return obj

    async def handler(req, ctx):
        return b"bad"

    async def shandler(req, ctx):
        yield b"good"
        yield b"bad"
        yield b"never"

    setup = setup_handlers(
        {"M": unary(handler, response_serializer=serialize), "S": stream(shandler, response_serializer=serialize)}
    )
    ref = same(setup, lambda run: (call_unary(run.channel, method("M")), call_stream(run.channel, method("S"))))
    assert ref[0].code != SC.OK and ref[1].responses == (b"good",)


def test_serializers_transform_messages():
    async def handler(req, ctx):
        return ("wrapped", req.upper())

    ref = _unary_case(
        handler,
        request=b"abc",
        request_deserializer=lambda b: b.decode("ascii"),
        response_serializer=lambda t: ("<" + t[1] + ">").encode("ascii"),
    )
    assert ref.responses == (b"<ABC>",)


def test_str_response_is_encoded_before_the_serializer():
    # grpc.aio encodes a str response as UTF-8 before it calls the response
    # serializer: the serializer gets bytes.
    def serialize(message):
        return b"<" + message + b">"

    async def handler(req, ctx):
        return "abc ü"

    async def shandler(req, ctx):
        yield "abc ü"
        await ctx.write("def")

    setup = setup_handlers(
        {"M": unary(handler, response_serializer=serialize), "S": stream(shandler, response_serializer=serialize)}
    )
    ref = same(setup, lambda run: (call_unary(run.channel, method("M")), call_stream(run.channel, method("S"))))
    assert ref[0].responses == ("<abc ü>".encode(),) and ref[1].responses == ("<abc ü>".encode(), b"<def>")


def test_str_response_without_serializer():
    # grpc.aio encodes a str response as UTF-8 when there is no serializer.
    async def handler(req, ctx):
        return "text ü"

    async def shandler(req, ctx):
        yield "streamed ü"

    setup = setup_handlers({"M": unary(handler), "S": stream(shandler)})
    ref = same(setup, lambda run: (call_unary(run.channel, method("M"), timeout=2), call_stream(run.channel, method("S"))))
    assert ref[0].responses == ("text ü".encode(),) and ref[1].responses == ("streamed ü".encode(),)


# -- unknown methods -------------------------------------------------------------


def test_unknown_method_and_service():
    async def handler(req, ctx):
        return req

    setup = setup_handlers({"M": unary(handler)})

    def scenario(run):
        return (
            call_unary(run.channel, method("Nope"), b"x").brief(),
            call_unary(run.channel, "/no.Such/Method", b"x").brief(),
            call_stream(run.channel, "/no.Such/Stream", b"x").brief(),
        )

    assert same(setup, scenario) == ((SC.UNIMPLEMENTED, "Method not found!"),) * 3


def test_compression_calls_are_accepted():
    async def handler(req, ctx):
        ctx.set_compression(grpc.Compression.Gzip)
        ctx.disable_next_message_compression()
        yield b"a" * 1000
        yield b"b" * 1000

    ref = _stream_case(handler)
    assert ref.code == SC.OK and ref.responses == (b"a" * 1000, b"b" * 1000)
