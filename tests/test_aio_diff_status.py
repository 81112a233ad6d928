"""Differential tests: status codes, details and messages that only
coroutine handlers can produce (context.write(), abort() with trailing
metadata, AbortError, str responses), grpc.aio.server() against
pygrpc_native.aio.server() (tests/diff/aio_harness.py). The scenarios both
kinds of server share are in test_diff_status.py.

grpc.aio's outcomes are part of the contract, so the tests pin them too.
The representative cases also run on uvloop.
"""

import array
import decimal
import enum
import logging
import time

import grpc
import grpc.aio
import pytest

from diff.aio_harness import (
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
from diff.flavours import ASYNCIO, each_loop

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


class _Status(grpc.Status):
    def __init__(self, code, details, trailing_metadata):
        self.code, self.details, self.trailing_metadata = code, details, trailing_metadata


# -- context.write() -------------------------------------------------------------


@each_loop
def test_stream_context_write(flavour):
    async def handler(req, ctx):
        for i in range(5):
            await ctx.write(req + b"%d" % i)

    ref = flavour.stream_case(handler)
    assert ref.code == SC.OK and ref.responses == tuple(b"req%d" % i for i in range(5))


def test_stream_context_write_returns_a_value():
    # A write-style handler that also returns something: grpc.aio ignores it.
    async def handler(req, ctx):
        await ctx.write(b"one")
        return b"ignored"

    ref = ASYNCIO.stream_case(handler)
    assert ref.code == SC.OK


def test_write_style_stream_no_messages():
    async def handler(req, ctx):
        return None

    ref = ASYNCIO.stream_case(handler)
    assert ref.code == SC.OK and ref.responses == ()


def test_stream_writes_none():
    async def handler(req, ctx):
        await ctx.write(b"a")
        await ctx.write(None)
        await ctx.write(b"b")

    ref = ASYNCIO.stream_case(handler)
    assert ref.code == SC.OK and ref.responses == (b"a", b"", b"b")


def test_stream_mixes_write_and_yield():
    # An async generator that also calls context.write().
    async def handler(req, ctx):
        await ctx.write(b"written")
        yield b"yielded"

    ASYNCIO.stream_case(handler)


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


def test_handler_exception_user_defined_class():
    class MyError(Exception):
        pass

    ref = ASYNCIO.unary_case(_raise(MyError("mine")))
    assert ref.code == SC.UNKNOWN and ref.details.endswith("MyError'>: mine")


class _NotAnException(BaseException):
    pass


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("str() failed")


def test_handler_raising_a_base_exception(caplog):
    """A BaseException that isn't an Exception (nor KeyboardInterrupt or
    SystemExit): grpc.aio logs it under its core's logger and leaves the
    call to its deadline; ours said nothing until asyncio collected the
    task ("Task exception was never retrieved")."""

    def scenario(run):
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="grpc._cython.cygrpc"):
            out = call_unary(run.channel, method("M"), timeout=0.5)
            time.sleep(0.1)
        logs = sorted({(r.name, r.getMessage()) for r in caplog.records if r.name == "grpc._cython.cygrpc"})
        return out.code, logs

    assert same(setup_handlers({"M": unary(_raise(_NotAnException("nae")))}), scenario) == (
        SC.DEADLINE_EXCEEDED,
        [("grpc._cython.cygrpc", "Exception not handled by _handle_exceptions in servicer method [/diff.Diff/M]")],
    )


def test_known_difference_handler_raising_an_unprintable_exception():
    """README: an exception whose str() raises: grpc.aio's handling of it
    fails and leaves the call to its deadline; ours answers UNKNOWN with
    the exception's class."""
    ref, ours = both(setup_handlers({"M": unary(_raise(_Unprintable()))}), lambda run: call_unary(run.channel, method("M"), timeout=0.5).brief())
    assert ref[0] == SC.DEADLINE_EXCEEDED
    assert ours == (SC.UNKNOWN, f"Unexpected {_Unprintable}")


def test_stream_write_style_exception_midway():
    async def handler(req, ctx):
        await ctx.write(b"one")
        raise ValueError("midway")

    ref = ASYNCIO.stream_case(handler)
    assert ref.brief() == (SC.UNKNOWN, "Unexpected <class 'ValueError'>: midway")
    assert ref.responses == (b"one",)


# -- abort ---------------------------------------------------------------------

def test_abort_with_trailing_metadata_argument():
    async def handler(req, ctx):
        await ctx.abort(SC.PERMISSION_DENIED, "denied", (("x-why", "policy"), ("x-why-bin", b"\x00\xff")))

    ref = ASYNCIO.unary_case(handler)
    assert ref.brief() == (SC.PERMISSION_DENIED, "denied")
    assert sorted(ref.trailing_metadata) == [("x-why", "policy"), ("x-why-bin", b"\x00\xff")]


def test_abort_trailing_metadata_argument_replaces_set_trailing_metadata():
    async def handler(req, ctx):
        ctx.set_trailing_metadata((("x-set", "1"),))
        await ctx.abort(SC.ABORTED, "a", (("x-abort", "2"),))

    ASYNCIO.unary_case(handler)


def test_abort_keeps_set_trailing_metadata_without_argument():
    async def handler(req, ctx):
        ctx.set_trailing_metadata((("x-set", "1"),))
        await ctx.abort(SC.ABORTED, "a")

    ref = ASYNCIO.unary_case(handler)
    assert ref.trailing_metadata == (("x-set", "1"),)


@pytest.mark.parametrize("code", [SC.NOT_FOUND, SC.CANCELLED, 5])
def test_context_reads_the_abort(code):
    """After abort(), code() reads the abort's code (as given: an int stays
    an int), details() its details, cancelled() is true for CANCELLED; an
    earlier set_code() is replaced. Done callbacks see the same."""

    def setup(server, state):
        async def handler(req, ctx):
            ctx.add_done_callback(lambda c: state.record("done", (c.code(), c.details(), c.cancelled(), c.done())))
            ctx.set_code(SC.INTERNAL)
            try:
                await ctx.abort(code, "nf")
            except grpc.aio.AbortError:
                state.record("after", (ctx.code(), ctx.details(), ctx.cancelled()))
                raise

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        return call_unary(run.channel, method("M")).brief(), run.state.wait_for("after"), run.state.wait_for("done")

    ref = same(setup, scenario)
    cancelled = code is SC.CANCELLED
    assert ref[1] == (code, "nf", cancelled) and ref[2] == (code, "nf", cancelled, True)


@pytest.mark.parametrize("details", ["", None])
@pytest.mark.parametrize("where", ["unary", "stream", "status"])
def test_abort_without_details_sends_set_details(where, details):
    """abort() with empty details sends what set_details() gave (also
    abort_with_status(), and after messages); None sends none."""

    async def handler(req, ctx):
        ctx.set_details("pre-set")
        if where == "stream":
            await ctx.write(b"one")
        if where == "status":
            await ctx.abort_with_status(_Status(SC.NOT_FOUND, details, ()))
        await ctx.abort(SC.NOT_FOUND, details)

    case = ASYNCIO.stream_case if where == "stream" else ASYNCIO.unary_case
    ref = case(handler)
    assert ref.brief() == (SC.NOT_FOUND, "pre-set" if details == "" else "")


class _Message(str, enum.Enum):
    GONE = "user not found"


@pytest.mark.parametrize("given", [b"bytes", 5, _Message.GONE], ids=["bytes", "int", "str-enum"])
def test_details_that_are_not_str_are_refused_where_given(given):
    """set_details() and abort() take a str: anything else raises
    TypeError in the handler (then UNKNOWN, and a stream sends nothing
    more); ours took it and failed only when sending the status. A str
    subclass (a str Enum's member) is refused too: grpc.aio's argument is
    typed str (ours sent it)."""

    def setup(server, state):
        async def set_then_stream(req, ctx):
            try:
                ctx.set_details(given)
            except TypeError as exc:
                state.record("set_details", describe(exc))
                raise
            yield b"one"

        async def abort_with(req, ctx):
            try:
                await ctx.abort(SC.NOT_FOUND, given)
            except BaseException as exc:
                state.record("abort", describe(exc))
                raise

        setup_handlers({"S": stream(set_then_stream), "A": unary(abort_with)})(server, state)

    def scenario(run):
        return (
            call_stream(run.channel, method("S")).brief(),
            run.state.wait_for("set_details"),
            call_unary(run.channel, method("A")).code,
            run.state.wait_for("abort"),
        )

    ref = same(setup, scenario)
    error = f"builtins.TypeError: Argument 'details' has incorrect type (expected str, got {type(given).__name__})"
    assert ref[1] == ref[3] == error


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


@each_loop
def test_abort_in_write_style_stream(flavour):
    async def handler(req, ctx):
        await ctx.write(b"1")
        await ctx.abort(SC.PERMISSION_DENIED, "no more")

    ref = flavour.stream_case(handler)
    assert ref.brief() == (SC.PERMISSION_DENIED, "no more") and ref.responses == (b"1",)


# -- None and str responses, serializers ------------------------------------------


def test_unary_returns_none_with_serializer():
    # With a response serializer, None goes through it (here: it fails).
    def serialize(obj):
        return obj.encode()

    async def handler(req, ctx):
        return None

    ASYNCIO.unary_case(handler, response_serializer=serialize)


def test_unary_serializer_returns_none():
    # A serializer that gives None: grpc.aio sends an empty message, OK.
    async def handler(req, ctx):
        return None

    ref = ASYNCIO.unary_case(handler, response_serializer=lambda message: message)
    assert ref.code == SC.OK and ref.responses == (b"",)


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


class _Bytes(bytes):
    pass


@pytest.mark.parametrize(
    "value",
    [5, bytearray(b"ba"), memoryview(b"mv"), _Bytes(b"sub"), array.array("b", b"ar"), decimal.Decimal(1)],
    # C types are named with their module, as grpc.aio's (C) check names them.
    ids=["int", "bytearray", "memoryview", "bytes-subclass", "array", "decimal"],
)
def test_response_that_is_not_bytes(value):
    # grpc.aio sends bytes only (exactly bytes: ours sent a subclass of
    # it): anything else ends the call UNKNOWN with its TypeError, from a
    # coroutine, an async generator, write() or a plain function in the
    # migration thread pool alike.
    async def coroutine(req, ctx):
        return value

    async def generator(req, ctx):
        yield value

    async def writer(req, ctx):
        await ctx.write(value)

    def plain(req, ctx):
        return value

    def plain_stream(req, ctx):
        yield value

    setup = setup_handlers(
        {
            "C": unary(coroutine),
            "G": stream(generator),
            "W": stream(writer),
            "P": unary(plain),
            "PS": stream(plain_stream),
        }
    )

    def scenario(run):
        return [call_unary(run.channel, method(m), timeout=2).brief() for m in ("C", "P")] + [
            call_stream(run.channel, method(m), timeout=2).brief() for m in ("G", "W", "PS")
        ]

    name = {array.array: "array.array", decimal.Decimal: "decimal.Decimal"}.get(type(value), type(value).__name__)
    expected = (SC.UNKNOWN, f"Unexpected <class 'TypeError'>: Expected bytes, got {name}")
    assert same(setup, scenario) == [expected] * 5


# -- codes that aren't a grpc.StatusCode ---------------------------------------------

# What grpc.aio sends for a code given to set_code() or abort(): an int in
# gRPC's range as that code (True is 1), anything else UNKNOWN. set_code(None)
# is a code there, not "no code" as on the sync server.
ODD_CODES = [
    (None, SC.UNKNOWN),
    (5, SC.NOT_FOUND),
    (True, SC.CANCELLED),
    (99, SC.UNKNOWN),
    (-1, SC.UNKNOWN),
    ("NOT_FOUND", SC.UNKNOWN),
]
ODD_CODE_IDS = ["None", "int", "True", "above-range", "negative", "str"]


@pytest.mark.parametrize("value,expected", ODD_CODES, ids=ODD_CODE_IDS)
def test_set_code_that_is_not_a_status_code(value, expected):
    # Out-of-range ints used to leave the call unanswered until its deadline,
    # and set_code(None) to end it OK with the response.
    async def coroutine(req, ctx):
        ctx.set_code(value)
        return b"resp"

    def plain(req, ctx):
        ctx.set_code(value)
        return b"resp"

    async def generator(req, ctx):
        yield b"one"
        ctx.set_code(value)

    setup = setup_handlers({"C": unary(coroutine), "P": unary(plain), "G": stream(generator)})

    def scenario(run):
        return [call_unary(run.channel, method(m), timeout=2) for m in ("C", "P")] + [
            call_stream(run.channel, method("G"), timeout=2)
        ]

    ref = same(setup, scenario)
    assert [(out.code, out.details, out.responses) for out in ref] == [
        (expected, "", ()),
        (expected, "", ()),
        (expected, "", (b"one",)),
    ]


@pytest.mark.parametrize("value,expected", ODD_CODES, ids=ODD_CODE_IDS)
def test_abort_with_a_code_that_is_not_a_status_code(value, expected):
    async def coroutine(req, ctx):
        await ctx.abort(value, "odd code")

    def plain(req, ctx):
        ctx.abort(value, "odd code")

    setup = setup_handlers({"C": unary(coroutine), "P": unary(plain)})
    ref = same(setup, lambda run: [call_unary(run.channel, method(m), timeout=2).brief() for m in ("C", "P")])
    assert ref == [(expected, "odd code")] * 2


def test_code_reads_back_what_was_set():
    def setup(server, state):
        async def handler(req, ctx):
            seen = [ctx.code()]
            for value in (None, 5, SC.NOT_FOUND, None):
                ctx.set_code(value)
                seen.append(ctx.code())
            state.record("seen", seen)
            return b"resp"

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        return call_unary(run.channel, method("M"), timeout=2).brief(), run.state.wait_for("seen")

    assert same(setup, scenario) == ((SC.UNKNOWN, ""), [None, None, 5, SC.NOT_FOUND, None])


@pytest.mark.parametrize("end", ["return", "abort"])
def test_details_read_back_what_was_set(end):
    """details() reads '' until set, then what was set; after
    set_details(None), None (ours read ''), and the status has no
    details."""

    def setup(server, state):
        async def handler(req, ctx):
            seen = [ctx.details()]
            for value in ("first", None):
                ctx.set_details(value)
                seen.append(ctx.details())
            state.record("seen", seen)
            ctx.set_code(SC.NOT_FOUND)
            if end == "abort":
                await ctx.abort(SC.NOT_FOUND)
            return b"resp"

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        return call_unary(run.channel, method("M"), timeout=2).brief(), run.state.wait_for("seen")

    assert same(setup, scenario) == ((SC.NOT_FOUND, ""), ["", "first", None])


def test_known_difference_abort_with_code_zero():
    # As abort(OK) (test_diff_status::test_abort_ok): grpc.aio leaves the call
    # unanswered until its deadline; ours answers UNKNOWN at once.
    async def coroutine(req, ctx):
        await ctx.abort(0, "zero")

    def plain(req, ctx):
        ctx.abort(0, "zero")

    setup = setup_handlers({"C": unary(coroutine), "P": unary(plain)})
    ref, ours = both(setup, lambda run: [call_unary(run.channel, method(m), timeout=1).code for m in ("C", "P")])
    assert ref == [SC.DEADLINE_EXCEEDED] * 2
    assert ours == [SC.UNKNOWN] * 2


# -- AbortError raised by the handler itself ------------------------------------------


def test_abort_error_raised_without_abort():
    # grpc.aio ends the call as for any exception, with an AssertionError's
    # details, keeping a code and trailing metadata set before. Ours used to
    # leave the call unanswered until its deadline.
    async def coroutine(req, ctx):
        raise grpc.aio.AbortError("raised by hand")

    async def coroutine_with_status(req, ctx):
        ctx.set_code(SC.NOT_FOUND)
        ctx.set_details("ignored")
        ctx.set_trailing_metadata((("k", "v"),))
        raise grpc.aio.AbortError("raised by hand")

    async def generator(req, ctx):
        yield b"one"
        raise grpc.aio.AbortError("raised by hand")

    def plain(req, ctx):
        ctx.set_code(SC.NOT_FOUND)
        raise grpc.aio.AbortError("raised by hand")

    setup = setup_handlers(
        {"C": unary(coroutine), "CS": unary(coroutine_with_status), "G": stream(generator), "P": unary(plain)}
    )

    def scenario(run):
        return [call_unary(run.channel, method(m), timeout=2) for m in ("C", "CS", "P")] + [
            call_stream(run.channel, method("G"), timeout=2)
        ]

    replaced = "Unexpected <class 'AssertionError'>: Abort error has been replaced!"
    ref = same(setup, scenario)
    assert [(out.code, out.details, out.trailing_metadata, out.responses) for out in ref] == [
        (SC.UNKNOWN, replaced, (), ()),
        (SC.NOT_FOUND, replaced, (("k", "v"),), ()),
        (SC.NOT_FOUND, replaced, (), ()),
        (SC.UNKNOWN, replaced, (), (b"one",)),
    ]


def test_handler_failures_are_logged_where_grpc_aio_logs_them(caplog):
    """Under grpc.aio's logger and in its words (ours logged under
    pygrpc_native)."""

    def setup(server, state):
        async def handler(req, ctx):
            ctx.add_done_callback(lambda c: 1 / 0)
            raise RuntimeError("handler boom")

        setup_handlers({"Boom": unary(handler)})(server, state)

    def scenario(run):
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="grpc._cython.cygrpc"):
            code = call_unary(run.channel, method("Boom")).code
            time.sleep(0.2)  # the callback runs after the answer
        return code, sorted({(r.name, r.getMessage()) for r in caplog.records if r.name.startswith("grpc.")})

    ref = same(setup, scenario)
    assert ref == (
        SC.UNKNOWN,
        [
            ("grpc._cython.cygrpc", "Error in callback for method [/diff.Diff/Boom]"),
            ("grpc._cython.cygrpc", "Unexpected [RuntimeError] raised by servicer method [/diff.Diff/Boom]"),
        ],
    )


def test_status_refused_for_its_details_or_metadata_is_logged_as_grpc_aio_logs_it(caplog):
    """Details that can't be encoded (a lone surrogate) and trailing
    metadata gRPC can't carry (an uppercase key): grpc.aio logs them under
    its core's logger as the handler's error and its core's refusal; ours
    logged "Cannot send trailing metadata" for both."""

    async def bad_details(req, ctx):
        ctx.set_code(SC.NOT_FOUND)
        ctx.set_details("bad \ud800 x")

    async def bad_key(req, ctx):
        ctx.set_trailing_metadata((("Upper", "v"),))
        return b"r"

    def scenario(run):
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="grpc._cython.cygrpc"):
            codes = [call_unary(run.channel, method(m), timeout=0.5).code for m in ("D", "K")]
            time.sleep(0.1)
        logs = sorted({r.getMessage() for r in caplog.records if r.name == "grpc._cython.cygrpc"})
        return codes, logs

    assert same(setup_handlers({"D": unary(bad_details), "K": unary(bad_key)}), scenario) == (
        [SC.DEADLINE_EXCEEDED, SC.INTERNAL],
        [
            "ExecuteBatchError raised in core by servicer method [/diff.Diff/K]",
            "Unexpected [UnicodeEncodeError] raised by servicer method [/diff.Diff/D]",
        ],
    )
