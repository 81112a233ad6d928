"""Differential tests: status codes, details and messages of unary and
server-streaming calls, each scenario run on both kinds of server
(grpc.server() and grpc.aio.server() against pygrpc_native's,
tests/diff/flavours.py).

Where grpcio's outcome is part of the contract, the test pins it too; the
sync and the aio server answer some of these differently (a handler
exception's details, a unary handler returning None), and the pins say so.
Scenarios that only one kind of server can express are in
test_server_diff_status.py and test_aio_diff_status.py.
"""

import asyncio

import grpc
import grpc.aio
import pytest

from diff import status_details
from diff.flavours import ASYNCIO, SYNC, each_flavour, each_flavour_and_uvloop
from diff.harness import call_stream, call_unary, method, retrying_channel_options
from h2_raw import RawH2, grpc_message

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


def _exception_details(flavour, exc_type, message):
    """What the client sees as details when a handler raised exc_type(message)."""
    return flavour.pick(
        sync=f"Exception calling application: {message}", aio=f"Unexpected <class '{exc_type}'>: {message}"
    )


def _iteration_details(flavour, exc_type, message):
    """The details of an exception raised while a stream handler iterates."""
    return flavour.pick(
        sync=f"Exception iterating responses: {message}", aio=f"Unexpected <class '{exc_type}'>: {message}"
    )


def _raw_answers(raw, names):
    """Calls each method of names (one letter each) in turn on a raw
    connection with request b"x": (name, the frames of its answer, its end
    last)."""
    for stream_id, name in zip(range(1, 2 * len(names), 2), names):
        raw.unary(stream_id, method(name), b"x")
        frames = raw.collect(lambda fs, i=stream_id: any(f.stream_id == i and f.end_stream for f in fs))
        yield name, [f for f in frames if f.stream_id == stream_id]


# -- success -------------------------------------------------------------------


@each_flavour_and_uvloop
def test_unary_success(flavour):
    async def handler(req, ctx):
        await asyncio.sleep(0)
        return b"echo:" + req

    ref = flavour.unary_case(handler)
    assert ref.code == SC.OK and ref.responses == (b"echo:req",)


@each_flavour
def test_unary_empty_request_and_response(flavour):
    async def handler(req, ctx):
        return b""

    ref = flavour.unary_case(handler, request=b"")
    assert ref.code == SC.OK and ref.responses == (b"",)


@each_flavour_and_uvloop
def test_server_stream_success(flavour):
    async def handler(req, ctx):
        for i in range(5):
            await asyncio.sleep(0)
            yield req + b"%d" % i

    ref = flavour.stream_case(handler)
    assert ref.code == SC.OK and ref.responses == tuple(b"req%d" % i for i in range(5))


@each_flavour
def test_server_stream_no_messages(flavour):
    async def handler(req, ctx):
        return
        yield  # noqa: unreachable - makes this an async generator

    ref = flavour.stream_case(handler)
    assert ref.code == SC.OK and ref.responses == ()


# -- exceptions ----------------------------------------------------------------


def _raise(exc):
    async def handler(req, ctx):
        raise exc

    return handler


@each_flavour_and_uvloop
def test_unary_handler_exception(flavour):
    ref = flavour.unary_case(_raise(ValueError("boom")))
    assert ref.brief() == (SC.UNKNOWN, _exception_details(flavour, "ValueError", "boom"))


@each_flavour
def test_unary_handler_exception_unicode_and_empty_message(flavour):
    setup = flavour.handlers(
        {
            "U": flavour.unary(_raise(RuntimeError("fehlgeschlagen: ü ✓ 日本"))),
            "E": flavour.unary(_raise(KeyError())),
        }
    )

    def scenario(run):
        return call_unary(run.channel, method("U")).brief(), call_unary(run.channel, method("E")).brief()

    assert flavour.same(setup, scenario) == (
        (SC.UNKNOWN, _exception_details(flavour, "RuntimeError", "fehlgeschlagen: ü ✓ 日本")),
        (SC.UNKNOWN, _exception_details(flavour, "KeyError", "")),
    )


@each_flavour
def test_stream_exception_while_iterating(flavour):
    async def handler(req, ctx):
        yield b"one"
        yield b"two"
        raise ValueError("midway")

    ref = flavour.stream_case(handler)
    assert ref.brief() == (SC.UNKNOWN, _iteration_details(flavour, "ValueError", "midway"))
    assert ref.responses == (b"one", b"two")


@each_flavour
@pytest.mark.parametrize("code", [SC.NOT_FOUND, SC.OK], ids=["NOT_FOUND", "OK"])
def test_code_set_before_exception(flavour, code):
    async def handler(req, ctx):
        ctx.set_code(code)
        raise ValueError("boom")

    # A code set wins, but OK: grpc.server() then ends the call OK with no
    # message, grpc.aio with UNKNOWN.
    ref = flavour.unary_case(handler)
    failed = _exception_details(flavour, "ValueError", "boom")
    if code == SC.OK:
        assert ref.brief() == flavour.pick(sync=(SC.OK, ""), aio=(SC.UNKNOWN, failed))
    else:
        assert ref.brief() == (code, failed)


@each_flavour
def test_details_set_before_exception(flavour):
    async def handler(req, ctx):
        ctx.set_details("my details")
        raise ValueError("boom")

    # The sync server keeps the details set; grpc.aio reports the exception.
    ref = flavour.unary_case(handler)
    assert ref.brief() == (SC.UNKNOWN, flavour.pick(sync="my details", aio=_exception_details(flavour, "ValueError", "boom")))


@each_flavour
def test_code_and_details_set_before_exception_win(flavour):
    async def handler(req, ctx):
        ctx.set_code(SC.FAILED_PRECONDITION)
        ctx.set_details("precondition")
        raise ValueError("boom")

    # The sync server keeps the details set; grpc.aio reports the exception.
    ref = flavour.unary_case(handler)
    assert ref.brief() == (
        SC.FAILED_PRECONDITION,
        flavour.pick(sync="precondition", aio=_exception_details(flavour, "ValueError", "boom")),
    )


def _not_str_details_handler(kind, details, abort):
    """A unary handler, a coroutine or a plain function (grpc.aio runs the
    latter in its migration thread pool), that sets a code and then gives
    details that aren't a str: through set_details, or through abort."""

    def plain(req, ctx):
        ctx.set_code(SC.INTERNAL)
        if abort:
            ctx.abort(SC.NOT_FOUND, details)
        else:
            ctx.set_details(details)
        return b"after"

    async def coroutine(req, ctx):
        ctx.set_code(SC.INTERNAL)
        if abort:
            await ctx.abort(SC.NOT_FOUND, details)
        ctx.set_details(details)
        return b"after"

    return plain if kind == "plain" else coroutine


@each_flavour
@pytest.mark.parametrize("kind", ["coroutine", "plain"])
@pytest.mark.parametrize("abort", [False, True], ids=["set_details", "abort"])
@pytest.mark.parametrize("details", [123, None, b"as bytes"], ids=["int", "None", "bytes"])
def test_details_that_are_not_a_str(flavour, kind, abort, details):
    # grpcio encodes details where they are set (bytes pass, anything else
    # raises there); grpc.aio fails to send them unless str or None.
    ref = flavour.unary_case(_not_str_details_handler(kind, details, abort))
    assert ref.code in (SC.INTERNAL, SC.NOT_FOUND, SC.UNKNOWN) and not ref.responses


@each_flavour
def test_stream_code_set_before_iteration_exception_wins(flavour):
    async def handler(req, ctx):
        yield b"a"
        ctx.set_code(SC.DATA_LOSS)
        raise ValueError("gone")

    ref = flavour.stream_case(handler)
    assert ref.brief() == (SC.DATA_LOSS, _iteration_details(flavour, "ValueError", "gone"))


@each_flavour
def test_raised_rpc_error_is_a_handler_exception(flavour):
    class Err(grpc.RpcError):
        def __str__(self):
            return "nested rpc failed"

    ref = flavour.unary_case(_raise(Err()))
    assert ref.code == SC.UNKNOWN
    assert ref.details == flavour.pick(
        sync="Exception calling application: nested rpc failed",
        aio=f"Unexpected {Err!r}: nested rpc failed",
    )


# -- abort ---------------------------------------------------------------------

_ABORT_CODES = [c for c in SC if c is not SC.OK]


@each_flavour
@pytest.mark.parametrize("code", _ABORT_CODES, ids=[c.name for c in _ABORT_CODES])
def test_abort_code(flavour, code):
    async def handler(req, ctx):
        await ctx.abort(code, f"aborted with {code.name} ü")

    ref = flavour.unary_case(handler)
    assert ref.brief() == (code, f"aborted with {code.name} ü")


@each_flavour
@pytest.mark.parametrize(
    "details",
    [
        "héllo wörld ✓ 日本語 🎉",
        "  leading and trailing spaces  ",
        "tab\there\nnew line\r\nCRLF",
        "",
        "percent %25 %zz % and \x7f and \x01 controls",
        "x" * 2000,
    ],
    ids=["unicode", "spaces", "whitespace", "empty", "percent-controls", "long"],
)
def test_abort_details(flavour, details):
    async def handler(req, ctx):
        await ctx.abort(SC.INVALID_ARGUMENT, details)

    ref = flavour.unary_case(handler)
    assert ref.code == SC.INVALID_ARGUMENT


@each_flavour
def test_abort_in_stream_after_messages(flavour):
    async def handler(req, ctx):
        yield b"1"
        yield b"2"
        await ctx.abort(SC.ABORTED, "stop here ✋")

    ref = flavour.stream_case(handler)
    assert ref.brief() == (SC.ABORTED, "stop here ✋") and ref.responses == (b"1", b"2")


@each_flavour_and_uvloop
def test_abort_raises_an_exception_the_handler_can_see(flavour):
    # What abort() raised: grpc.aio.AbortError on aio, an Exception on sync.
    async def handler(req, ctx, state):
        try:
            await ctx.abort(SC.NOT_FOUND, "nf")
        except BaseException as exc:
            state.record("raised", (type(exc) is grpc.aio.AbortError, isinstance(exc, Exception), str(exc)))
            raise
        state.record("raised", "nothing")

    ref = flavour.same(
        flavour.recording("M", handler), lambda run: (call_unary(run.channel, method("M")), run.state.wait_for("raised"))
    )
    message = flavour.pick(sync="", aio="Locally aborted.")
    assert ref[0].brief() == (SC.NOT_FOUND, "nf") and ref[1] == (flavour.aio, True, message)


@each_flavour
def test_abort_ok(flavour):
    """The sync servers answer ``abort(OK, ...)`` UNKNOWN at once. Known
    difference (aio/_context.py): grpc.aio leaves such a call unanswered
    until its deadline passes (the client sees DEADLINE_EXCEEDED);
    pygrpc_native.aio answers UNKNOWN at once, as the sync server does."""

    async def handler(req, ctx):
        await ctx.abort(SC.OK, "this is fine")

    setup = flavour.handlers({"M": flavour.unary(handler)})
    ref, ours = flavour.both(setup, lambda run: call_unary(run.channel, method("M"), timeout=1.0))
    assert ref.code == flavour.pick(sync=SC.UNKNOWN, aio=SC.DEADLINE_EXCEEDED)
    assert ours.code == SC.UNKNOWN
    if flavour is SYNC:
        assert ours == ref


@each_flavour_and_uvloop
def test_abort_swallowed_then_return(flavour):
    # The handler swallows what abort() raised and returns a response anyway:
    # the abort's status stands.
    async def handler(req, ctx):
        try:
            await ctx.abort(SC.UNAVAILABLE, "swallowed")
        except Exception:  # noqa: BLE001 - grpc.aio.AbortError on aio, Exception on sync
            pass
        return b"resp"

    ref = flavour.unary_case(handler)
    assert ref.brief() == (SC.UNAVAILABLE, "swallowed") and ref.responses == ()


@each_flavour
def test_abort_then_other_exception(flavour):
    # The handler catches the abort and raises something else: grpcio still
    # reports the abort.
    async def handler(req, ctx):
        try:
            await ctx.abort(SC.OUT_OF_RANGE, "range")
        except Exception:  # noqa: BLE001
            raise ValueError("other")

    ref = flavour.unary_case(handler)
    assert ref.brief() == (SC.OUT_OF_RANGE, "range")


class _Status(grpc.Status):
    def __init__(self, code, details, trailing_metadata):
        self.code = code
        self.details = details
        self.trailing_metadata = trailing_metadata


@each_flavour
def test_abort_with_status_plain(flavour):
    async def handler(req, ctx):
        await ctx.abort_with_status(_Status(SC.RESOURCE_EXHAUSTED, "quota ü", (("x-retry-after", "10"),)))

    ref = flavour.unary_case(handler)
    assert ref.brief() == (SC.RESOURCE_EXHAUSTED, "quota ü")
    assert ("x-retry-after", "10") in ref.trailing_metadata


# abort() takes trailing metadata only on grpc.aio.
@pytest.mark.parametrize(
    "flavour, style",
    [(SYNC, "abort_with_status"), (ASYNCIO, "abort_with_status"), (ASYNCIO, "abort")],
    ids=lambda value: str(value),
)
def test_rich_error_details(flavour, style):
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

    ref = flavour.same(flavour.handlers({"M": flavour.unary(handler)}), scenario)
    assert ref[0] == SC.INVALID_ARGUMENT and ref[4] == "invalid name ✗"
    assert ref[5] == [("name", "empty ✗")]


# grpc-status-details-bin is sent exactly as set (tests/diff/status_details.py);
# through abort()'s trailing metadata only on grpc.aio, and only with a code.
_DETAILS_TRAILER_CASES = [
    (flavour, via, case)
    for case in sorted(status_details.CASES)
    for flavour, via in ((SYNC, "set_trailing_metadata"), (ASYNCIO, "set_trailing_metadata"), (ASYNCIO, "abort"))
    if via != "abort" or status_details.CASES[case]()[1] is not None
]


@pytest.mark.parametrize("flavour, via, case", _DETAILS_TRAILER_CASES, ids=lambda value: str(value))
def test_status_details_trailer_is_sent_as_set(flavour, via, case):
    trailing, code, details = status_details.CASES[case]()

    async def handler(req, ctx):
        if via == "abort":
            await ctx.abort(code, details, trailing)
        ctx.set_trailing_metadata(trailing)
        if code is not None:
            ctx.set_code(code)
            ctx.set_details(details)
        return b"r"

    ref = flavour.unary_case(handler)
    assert ref.trailing_metadata == trailing


@each_flavour
def test_status_details_in_initial_metadata_are_sent(flavour):
    initial = ((status_details.DETAILS_KEY, status_details.status_bytes(3, "bad", True)),)

    async def handler(req, ctx):
        await ctx.send_initial_metadata(initial)
        return b"r"

    assert flavour.unary_case(handler).initial_metadata == initial


# -- set_code / set_details with a normal return --------------------------------


@each_flavour
def test_set_code_and_details_with_response(flavour):
    async def handler(req, ctx):
        ctx.set_code(SC.NOT_FOUND)
        ctx.set_details("not here ü")
        return b"ignored"

    ref = flavour.unary_case(handler)
    assert ref.brief() == (SC.NOT_FOUND, "not here ü") and ref.responses == ()


@each_flavour
def test_set_code_with_a_normal_return_sends_headers_first(flavour):
    """A unary-response handler that sets a code and returns: grpc.server()
    sends the message it returned (none for None) before the status,
    grpc.aio an empty one whatever it returned; either way the client has
    response headers, which commit the call. Ours sent Trailers-Only, which
    a client's retry policy retries: the handler ran again."""

    def setup(server, state):
        async def with_message(req, ctx):
            state.append("runs", "M")
            ctx.set_code(SC.UNAVAILABLE)
            return b"ignored"

        async def with_none(req, ctx):
            state.append("runs", "N")
            ctx.set_code(SC.UNAVAILABLE)

        async def stream_in(reqs, ctx):
            async for _ in reqs:
                pass
            ctx.set_code(SC.UNAVAILABLE)
            return b"ignored"

        handlers = {"M": flavour.unary(with_message), "N": flavour.unary(with_none), "S": flavour.stream_unary(stream_in)}
        flavour.handlers(handlers)(server, state)

    def scenario(run):
        wire = {}
        with RawH2(run.port) as raw:
            for name, frames in _raw_answers(raw, "MNS"):
                wire[name] = [(f.kind, f.data) for f in frames if f.kind in ("headers", "data")]
        run.state.records.pop("runs", None)
        codes = []
        with grpc.insecure_channel(f"127.0.0.1:{run.port}", options=retrying_channel_options()) as channel:
            for name in "MN":
                try:
                    channel.unary_unary(method(name))(b"x", timeout=10)
                except grpc.RpcError as err:
                    codes.append(err.code())
        return wire, codes, run.state.records.get("runs")

    ref = flavour.same(setup, scenario)
    empty = [("headers", b""), ("data", grpc_message(b"")), ("headers", b"")]
    if flavour is SYNC:
        assert ref[0] == {"M": [("headers", b""), ("data", grpc_message(b"ignored")), ("headers", b"")], "N": [("headers", b"")], "S": [("headers", b""), ("data", grpc_message(b"ignored")), ("headers", b"")]}
        assert ref[1:] == ([SC.UNAVAILABLE] * 2, ["M", "N", "N", "N"])  # Trailers-Only is retried
    else:
        assert ref[0] == {"M": empty, "N": empty, "S": empty}
        assert ref[1:] == ([SC.UNAVAILABLE] * 2, ["M", "N"])


@each_flavour
def test_set_code_only_details_only_and_code_ok(flavour):
    async def code_only(req, ctx):
        ctx.set_code(SC.ALREADY_EXISTS)
        return b"ignored"

    async def details_only(req, ctx):
        ctx.set_details("details but OK")
        return b"resp"

    async def code_ok(req, ctx):
        ctx.set_code(SC.OK)
        return b"resp"

    setup = flavour.handlers({"C": flavour.unary(code_only), "D": flavour.unary(details_only), "O": flavour.unary(code_ok)})
    ref = flavour.same(setup, lambda run: [call_unary(run.channel, method(m)) for m in "CDO"])
    assert ref[0].code == SC.ALREADY_EXISTS
    assert ref[2].code == SC.OK and ref[2].responses == (b"resp",)


@each_flavour
def test_details_of_an_ok_status_reach_the_wire(flavour):
    """Details set on a call that ends OK go out in grpc-message, as
    grpcio's servers send them (grpcio's own client hides them; grpc-js,
    curl and grpc-go's status do not). Ours sent an empty grpc-message."""

    async def details_only(req, ctx):
        ctx.set_details("details but OK")
        return b"resp"

    async def code_and_details(req, ctx):
        ctx.set_code(SC.OK)
        ctx.set_details("ok, d\u00e9tails")
        return b"resp"

    async def stream_details(req, ctx):
        yield b"a"
        ctx.set_details("streamed")

    setup = flavour.handlers(
        {"D": flavour.unary(details_only), "C": flavour.unary(code_and_details), "S": flavour.stream(stream_details)}
    )

    def scenario(run):
        trailers = {}
        with RawH2(run.port) as raw:
            for name, frames in _raw_answers(raw, "DCS"):
                end = frames[-1].headers
                trailers[name] = (end.get("grpc-status"), end.get("grpc-message"))
        return trailers

    ref = flavour.same(setup, scenario)
    assert ref == {"D": ("0", "details but OK"), "C": ("0", "ok, d%C3%A9tails"), "S": ("0", "streamed")}


@each_flavour
def test_set_code_twice_last_wins(flavour):
    async def handler(req, ctx):
        ctx.set_code(SC.NOT_FOUND)
        ctx.set_details("first")
        ctx.set_code(SC.ABORTED)
        ctx.set_details("second")
        return b""

    ref = flavour.unary_case(handler)
    assert ref.brief() == (SC.ABORTED, "second")


@each_flavour
def test_stream_set_code_after_messages(flavour):
    async def handler(req, ctx):
        yield b"a"
        yield b"b"
        ctx.set_code(SC.UNAVAILABLE)
        ctx.set_details("partial")

    ref = flavour.stream_case(handler)
    assert ref.brief() == (SC.UNAVAILABLE, "partial") and ref.responses == (b"a", b"b")


@each_flavour
def test_code_and_details_getters(flavour):
    # What context.code() and context.details() return, before and after they are set.
    def setup(server, state):
        async def handler(req, ctx):
            before = (ctx.code(), ctx.details())
            ctx.set_code(SC.NOT_FOUND)
            ctx.set_details("ü details")
            state.record("getters", (before, (ctx.code(), ctx.details())))
            return b""

        flavour.handlers({"M": flavour.unary(handler)})(server, state)

    ref = flavour.same(setup, lambda run: (call_unary(run.channel, method("M")), run.state.wait_for("getters")))
    # The sync context gives the details back encoded.
    assert ref[1][1] == (SC.NOT_FOUND, flavour.pick(sync="ü details".encode(), aio="ü details"))


# -- None responses and (de)serializers -------------------------------------------


@each_flavour_and_uvloop
def test_unary_returns_none(flavour):
    # The sync server: INTERNAL; grpc.aio: OK with an empty message.
    async def handler(req, ctx):
        return None

    ref = flavour.unary_case(handler)
    assert ref.brief() == flavour.pick(sync=(SC.INTERNAL, "Failed to serialize response!"), aio=(SC.OK, ""))
    assert ref.responses == flavour.pick(sync=(), aio=(b"",))


@each_flavour
def test_unary_returns_none_with_code_and_details(flavour):
    async def code_only(req, ctx):
        ctx.set_code(SC.NOT_FOUND)

    async def code_and_details(req, ctx):
        ctx.set_code(SC.NOT_FOUND)
        ctx.set_details("nothing")

    setup = flavour.handlers({"C": flavour.unary(code_only), "D": flavour.unary(code_and_details)})
    ref = flavour.same(setup, lambda run: [call_unary(run.channel, method(m)).brief() for m in "CD"])
    if flavour is SYNC:
        assert ref[0] == (SC.NOT_FOUND, "Failed to serialize response!")
    assert ref[1] == (SC.NOT_FOUND, "nothing")


@each_flavour
def test_stream_yields_none(flavour):
    # The sync server ends the stream at None; grpc.aio writes an empty message and goes on.
    async def handler(req, ctx):
        yield b"a"
        yield None
        yield b"after none"

    ref = flavour.stream_case(handler)
    assert ref.code == SC.OK and ref.responses == flavour.pick(sync=(b"a",), aio=(b"a", b"", b"after none"))


@each_flavour
def test_failing_request_deserializer(flavour):
    def deserialize(data):
        raise ValueError("cannot parse")

    async def handler(req, ctx):
        return req

    async def shandler(req, ctx):
        yield b"x"

    setup = flavour.handlers(
        {
            "M": flavour.unary(handler, request_deserializer=deserialize),
            "S": flavour.stream(shandler, request_deserializer=deserialize),
        }
    )
    ref = flavour.same(
        setup, lambda run: (call_unary(run.channel, method("M")).brief(), call_stream(run.channel, method("S")).brief())
    )
    assert ref[0][0] == ref[1][0] != SC.OK
    if flavour is SYNC:
        assert ref == ((SC.INTERNAL, "Exception deserializing request!"),) * 2


@each_flavour
def test_failing_response_serializer(flavour):
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

    setup = flavour.handlers(
        {
            "M": flavour.unary(handler, response_serializer=serialize),
            "S": flavour.stream(shandler, response_serializer=serialize),
        }
    )
    ref = flavour.same(setup, lambda run: (call_unary(run.channel, method("M")), call_stream(run.channel, method("S"))))
    assert ref[0].code != SC.OK and ref[1].responses == (b"good",)
    if flavour is SYNC:
        assert ref[0].brief() == ref[1].brief() == (SC.INTERNAL, "Failed to serialize response!")


@each_flavour
def test_serializers_transform_messages(flavour):
    # What the handler returns goes to the serializer as it is (here a tuple).
    async def handler(req, ctx):
        return ("wrapped", req.upper())

    ref = flavour.unary_case(
        handler,
        request=b"abc",
        request_deserializer=lambda b: b.decode("ascii"),
        response_serializer=lambda t: ("<" + t[1] + ">").encode("ascii"),
    )
    assert ref.responses == (b"<ABC>",)


# -- unknown methods -------------------------------------------------------------


@each_flavour
def test_unknown_method_and_service(flavour):
    async def handler(req, ctx):
        return req

    setup = flavour.handlers({"M": flavour.unary(handler)})

    def scenario(run):
        return (
            call_unary(run.channel, method("Nope"), b"x").brief(),
            call_unary(run.channel, "/no.Such/Method", b"x").brief(),
            call_stream(run.channel, "/no.Such/Stream", b"x").brief(),
        )

    assert flavour.same(setup, scenario) == ((SC.UNIMPLEMENTED, "Method not found!"),) * 3


@each_flavour
def test_no_handlers_at_all(flavour):
    ref = flavour.same(lambda server, state: None, lambda run: call_unary(run.channel, method("M"), b"x"))
    assert ref.brief() == (SC.UNIMPLEMENTED, "Method not found!")


# -- compression calls are accepted ----------------------------------------------


@each_flavour
def test_set_compression_and_disable_next_message_compression(flavour):
    async def handler(req, ctx):
        ctx.set_compression(grpc.Compression.Gzip)
        ctx.disable_next_message_compression()
        yield b"a" * 1000
        yield b"b" * 1000

    ref = flavour.stream_case(handler)
    assert ref.code == SC.OK and ref.responses == (b"a" * 1000, b"b" * 1000)
