"""Differential tests: status codes, details and messages of unary and
server-streaming calls, grpc.server() against pygrpc_native.server().

Each test runs one servicer on both servers with the same grpcio client and
asserts the client observed the same thing (tests/diff/harness.py). Where
grpcio's outcome is part of the contract, the test pins it too.
"""

import grpc
import pytest

from diff import status_details
from diff.harness import call_stream, call_unary, method, same, setup_handlers, stream, unary

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


def _unary_case(fn, request=b"req", **handler_kwargs):
    setup = setup_handlers({"M": unary(fn, **handler_kwargs)})
    return same(setup, lambda run: call_unary(run.channel, method("M"), request))


def _stream_case(fn, request=b"req", **handler_kwargs):
    setup = setup_handlers({"S": stream(fn, **handler_kwargs)})
    return same(setup, lambda run: call_stream(run.channel, method("S"), request))


# -- success -------------------------------------------------------------------


def test_unary_success():
    ref = _unary_case(lambda req, ctx: b"echo:" + req)
    assert ref.code == SC.OK and ref.responses == (b"echo:req",)


def test_unary_empty_request_and_response():
    ref = _unary_case(lambda req, ctx: b"", request=b"")
    assert ref.code == SC.OK and ref.responses == (b"",)


def test_server_stream_success():
    ref = _stream_case(lambda req, ctx: (req + str(i).encode() for i in range(5)))
    assert ref.code == SC.OK and ref.responses == tuple(b"req%d" % i for i in range(5))


def test_server_stream_no_messages():
    ref = _stream_case(lambda req, ctx: iter(()))
    assert ref.code == SC.OK and ref.responses == ()


def test_server_stream_handler_returns_list():
    # grpcio calls next() on what the handler returns: a list is not an iterator.
    ref = _stream_case(lambda req, ctx: [b"a", b"b"])
    assert ref.code == SC.UNKNOWN


# -- exceptions ----------------------------------------------------------------


def _raise(exc):
    def handler(req, ctx):
        raise exc

    return handler


def test_unary_handler_exception():
    ref = _unary_case(_raise(ValueError("boom")))
    assert ref.brief() == (SC.UNKNOWN, "Exception calling application: boom")


def test_unary_handler_exception_unicode_message():
    ref = _unary_case(_raise(RuntimeError("fehlgeschlagen: ü ✓ 日本")))
    assert ref.brief() == (SC.UNKNOWN, "Exception calling application: fehlgeschlagen: ü ✓ 日本")


def test_unary_handler_exception_empty_message():
    ref = _unary_case(_raise(KeyError()))
    assert ref.brief() == (SC.UNKNOWN, "Exception calling application: ")


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no str for you")


def test_unary_handler_unprintable_exception():
    ref = _unary_case(_raise(_Unprintable()))
    assert ref.code == SC.UNKNOWN


def test_stream_handler_exception_before_iterator():
    ref = _stream_case(_raise(ValueError("early")))
    assert ref.brief() == (SC.UNKNOWN, "Exception calling application: early")


def test_stream_exception_while_iterating():
    def handler(req, ctx):
        yield b"one"
        yield b"two"
        raise ValueError("midway")

    ref = _stream_case(handler)
    assert ref.brief() == (SC.UNKNOWN, "Exception iterating responses: midway")
    assert ref.responses == (b"one", b"two")


def test_stream_exception_on_first_next():
    def handler(req, ctx):
        raise ValueError("first")
        yield b"never"  # noqa: unreachable - makes this a generator

    ref = _stream_case(handler)
    assert ref.brief() == (SC.UNKNOWN, "Exception iterating responses: first")


def test_code_set_before_exception_wins():
    def handler(req, ctx):
        ctx.set_code(SC.NOT_FOUND)
        raise ValueError("boom")

    ref = _unary_case(handler)
    assert ref.brief() == (SC.NOT_FOUND, "Exception calling application: boom")


def test_details_set_before_exception_win():
    def handler(req, ctx):
        ctx.set_details("my details")
        raise ValueError("boom")

    ref = _unary_case(handler)
    assert ref.brief() == (SC.UNKNOWN, "my details")


def test_code_and_details_set_before_exception_win():
    def handler(req, ctx):
        ctx.set_code(SC.FAILED_PRECONDITION)
        ctx.set_details("precondition")
        raise ValueError("boom")

    ref = _unary_case(handler)
    assert ref.brief() == (SC.FAILED_PRECONDITION, "precondition")


def test_code_ok_set_before_exception():
    def handler(req, ctx):
        ctx.set_code(SC.OK)
        raise ValueError("boom")

    _unary_case(handler)


def test_stream_code_set_before_iteration_exception_wins():
    def handler(req, ctx):
        yield b"a"
        ctx.set_code(SC.DATA_LOSS)
        raise ValueError("gone")

    ref = _stream_case(handler)
    assert ref.brief() == (SC.DATA_LOSS, "Exception iterating responses: gone")


def test_raised_rpc_error_is_a_handler_exception():
    class Err(grpc.RpcError):
        def __str__(self):
            return "nested rpc failed"

    ref = _unary_case(_raise(Err()))
    assert ref.brief() == (SC.UNKNOWN, "Exception calling application: nested rpc failed")


# -- abort ---------------------------------------------------------------------

_ABORT_CODES = [c for c in SC if c is not SC.OK]


@pytest.mark.parametrize("code", _ABORT_CODES, ids=[c.name for c in _ABORT_CODES])
def test_abort_code(code):
    def handler(req, ctx):
        ctx.abort(code, f"aborted with {code.name}")

    ref = _unary_case(handler)
    assert ref.brief() == (code, f"aborted with {code.name}")


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
def test_abort_details(details):
    def handler(req, ctx):
        ctx.abort(SC.INVALID_ARGUMENT, details)

    ref = _unary_case(handler)
    assert ref.code == SC.INVALID_ARGUMENT


def test_abort_in_stream_after_messages():
    def handler(req, ctx):
        yield b"1"
        yield b"2"
        ctx.abort(SC.ABORTED, "stop here ✋")

    ref = _stream_case(handler)
    assert ref.brief() == (SC.ABORTED, "stop here ✋")
    assert ref.responses == (b"1", b"2")


def test_abort_in_stream_before_iterator():
    def handler(req, ctx):
        ctx.abort(SC.PERMISSION_DENIED, "no stream")

    ref = _stream_case(handler)
    assert ref.brief() == (SC.PERMISSION_DENIED, "no stream")


def test_abort_ok():
    def handler(req, ctx):
        ctx.abort(SC.OK, "this is fine")

    ref = _unary_case(handler)
    assert ref.code == SC.UNKNOWN


def test_abort_raises_exception_the_handler_can_see():
    # The handler catches what abort() raises and reports its type/args.
    def handler(req, ctx):
        try:
            ctx.abort(SC.NOT_FOUND, "nf")
        except Exception as exc:  # noqa: BLE001
            ctx.set_trailing_metadata((("raised", f"{type(exc).__mro__[-2].__name__} {exc.args!r}"),))
            raise

    ref = _unary_case(handler)
    assert ref.code == SC.NOT_FOUND


def test_abort_swallowed_then_return():
    # The handler swallows abort()'s exception and returns a response anyway.
    def handler(req, ctx):
        try:
            ctx.abort(SC.UNAVAILABLE, "swallowed")
        except Exception:  # noqa: BLE001
            pass
        return b"resp"

    _unary_case(handler)


def test_abort_then_other_exception():
    # The handler catches the abort and raises something else: grpcio still
    # reports the abort.
    def handler(req, ctx):
        try:
            ctx.abort(SC.OUT_OF_RANGE, "range")
        except Exception:  # noqa: BLE001
            raise ValueError("other")

    ref = _unary_case(handler)
    assert ref.code == SC.OUT_OF_RANGE


def test_abort_with_status_plain():
    def handler(req, ctx):
        ctx.abort_with_status(_Status(SC.RESOURCE_EXHAUSTED, "quota ü", (("x-retry-after", "10"),)))

    ref = _unary_case(handler)
    assert ref.brief() == (SC.RESOURCE_EXHAUSTED, "quota ü")
    assert ("x-retry-after", "10") in ref.trailing_metadata


class _Status(grpc.Status):
    def __init__(self, code, details, trailing_metadata):
        self.code = code
        self.details = details
        self.trailing_metadata = trailing_metadata


def test_abort_with_status_rich_error_details():
    rpc_status = pytest.importorskip("grpc_status.rpc_status")
    from google.protobuf import any_pb2
    from google.rpc import code_pb2, error_details_pb2, status_pb2

    def handler(req, ctx):
        detail = any_pb2.Any()
        detail.Pack(
            error_details_pb2.BadRequest(
                field_violations=[error_details_pb2.BadRequest.FieldViolation(field="name", description="empty ✗")]
            )
        )
        status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message="invalid name ✗", details=[detail])
        ctx.abort_with_status(rpc_status.to_status(status))

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


# grpc-status-details-bin is sent exactly as set (tests/diff/status_details.py).


@pytest.mark.parametrize("case", sorted(status_details.CASES))
def test_status_details_trailer_is_sent_as_set(case):
    trailing, code, details = status_details.CASES[case]()

    def handler(req, ctx):
        ctx.set_trailing_metadata(trailing)
        if code is not None:
            ctx.set_code(code)
            ctx.set_details(details)
        return b"r"

    ref = _unary_case(handler)
    assert ref.trailing_metadata == trailing


def test_status_details_in_initial_metadata_are_sent():
    initial = ((status_details.DETAILS_KEY, status_details.status_bytes(3, "bad", True)),)

    def handler(req, ctx):
        ctx.send_initial_metadata(initial)
        return b"r"

    assert _unary_case(handler).initial_metadata == initial


def test_status_details_disagreeing_with_the_status_fail_on_the_client():
    # grpc_status.rpc_status.from_call() refuses details whose code or
    # message differ from the call's status: the server sends them as set.
    rpc_status = pytest.importorskip("grpc_status.rpc_status")

    def handler(req, ctx):
        ctx.set_trailing_metadata(((status_details.DETAILS_KEY, status_details.status_bytes(3, "bad", True)),))
        ctx.set_code(SC.NOT_FOUND)
        ctx.set_details("other")
        return b""

    def scenario(run):
        try:
            run.channel.unary_unary(method("M")).with_call(b"x", timeout=5)
        except grpc.RpcError as err:
            return status_details.from_call_outcome(rpc_status, err)
        return "no error"

    ref = same(setup_handlers({"M": unary(handler)}), scenario)
    assert ref.startswith("ValueError")


# -- set_code / set_details with a normal return --------------------------------


def test_set_code_and_details_with_response():
    def handler(req, ctx):
        ctx.set_code(SC.NOT_FOUND)
        ctx.set_details("not here ü")
        return b"ignored"

    ref = _unary_case(handler)
    assert ref.brief() == (SC.NOT_FOUND, "not here ü")


def test_set_code_only_with_response():
    def handler(req, ctx):
        ctx.set_code(SC.ALREADY_EXISTS)
        return b"ignored"

    ref = _unary_case(handler)
    assert ref.code == SC.ALREADY_EXISTS


def test_set_details_only_with_response():
    def handler(req, ctx):
        ctx.set_details("details but OK")
        return b"resp"

    _unary_case(handler)


def test_set_code_ok_explicitly():
    def handler(req, ctx):
        ctx.set_code(SC.OK)
        return b"resp"

    ref = _unary_case(handler)
    assert ref.code == SC.OK and ref.responses == (b"resp",)


def test_set_details_bytes():
    def handler(req, ctx):
        ctx.set_code(SC.INTERNAL)
        ctx.set_details(b"bytes details")
        return b""

    ref = _unary_case(handler)
    assert ref.brief() == (SC.INTERNAL, "bytes details")


def test_set_code_twice_last_wins():
    def handler(req, ctx):
        ctx.set_code(SC.NOT_FOUND)
        ctx.set_details("first")
        ctx.set_code(SC.ABORTED)
        ctx.set_details("second")
        return b""

    ref = _unary_case(handler)
    assert ref.brief() == (SC.ABORTED, "second")


def test_stream_set_code_after_messages():
    def handler(req, ctx):
        yield b"a"
        yield b"b"
        ctx.set_code(SC.UNAVAILABLE)
        ctx.set_details("partial")

    ref = _stream_case(handler)
    assert ref.brief() == (SC.UNAVAILABLE, "partial") and ref.responses == (b"a", b"b")


def test_code_and_details_getters():
    # What context.code() and context.details() return, reported in metadata.
    def handler(req, ctx):
        before = (ctx.code(), ctx.details())
        ctx.set_code(SC.NOT_FOUND)
        ctx.set_details("ü details")
        after = (ctx.code(), ctx.details())
        ctx.set_trailing_metadata((("getters", repr((before, after))),))
        return b""

    _unary_case(handler)


# -- None responses and (de)serializers -------------------------------------------


def test_unary_returns_none():
    ref = _unary_case(lambda req, ctx: None)
    assert ref.brief() == (SC.INTERNAL, "Failed to serialize response!")


def test_unary_returns_none_with_code():
    def handler(req, ctx):
        ctx.set_code(SC.NOT_FOUND)

    ref = _unary_case(handler)
    assert ref.brief() == (SC.NOT_FOUND, "Failed to serialize response!")


def test_unary_returns_none_with_code_and_details():
    def handler(req, ctx):
        ctx.set_code(SC.NOT_FOUND)
        ctx.set_details("nothing")

    ref = _unary_case(handler)
    assert ref.brief() == (SC.NOT_FOUND, "nothing")


def test_unary_returns_none_with_code_ok():
    def handler(req, ctx):
        ctx.set_code(SC.OK)

    _unary_case(handler)


def test_stream_yields_none():
    def handler(req, ctx):
        yield b"a"
        yield None
        yield b"after none"

    ref = _stream_case(handler)
    assert ref.code == SC.OK and ref.responses == (b"a",)


def test_failing_request_deserializer():
    def deserialize(data):
        if data == b"bad":
            raise ValueError("cannot parse")
        return data

    ref = _unary_case(lambda req, ctx: req, request=b"bad", request_deserializer=deserialize)
    assert ref.brief() == (SC.INTERNAL, "Exception deserializing request!")


def test_failing_request_deserializer_stream():
    def deserialize(data):
        raise ValueError("cannot parse")

    ref = _stream_case(lambda req, ctx: iter([b"x"]), request_deserializer=deserialize)
    assert ref.brief() == (SC.INTERNAL, "Exception deserializing request!")


def test_request_deserializer_returns_none():
    ref = _unary_case(lambda req, ctx: b"ran", request_deserializer=lambda data: None)
    assert ref.code == SC.INTERNAL


def test_failing_response_serializer():
    def serialize(obj):
        raise TypeError("cannot serialize")

    ref = _unary_case(lambda req, ctx: req, response_serializer=serialize)
    assert ref.brief() == (SC.INTERNAL, "Failed to serialize response!")


def test_failing_response_serializer_with_code_set():
    def serialize(obj):
        raise TypeError("cannot serialize")

    def handler(req, ctx):
        ctx.set_code(SC.CANCELLED)
        return req

    _unary_case(handler, response_serializer=serialize)


def test_failing_response_serializer_in_stream():
    def serialize(obj):
        if obj == b"bad":
            raise TypeError("cannot serialize")
        return obj

    ref = _stream_case(lambda req, ctx: iter([b"good", b"bad", b"never"]), response_serializer=serialize)
    assert ref.brief() == (SC.INTERNAL, "Failed to serialize response!") and ref.responses == (b"good",)


def test_serializers_transform_messages():
    ref = _unary_case(
        lambda req, ctx: req.upper(),
        request=b"abc",
        request_deserializer=lambda b: b.decode("ascii"),
        response_serializer=lambda s: ("<" + s + ">").encode("ascii"),
    )
    assert ref.responses == (b"<ABC>",)


# -- unknown methods -------------------------------------------------------------


def test_unknown_method_on_known_service():
    setup = setup_handlers({"M": unary(lambda req, ctx: req)})
    ref = same(setup, lambda run: call_unary(run.channel, method("Nope"), b"x"))
    assert ref.brief() == (SC.UNIMPLEMENTED, "Method not found!")


def test_unknown_service():
    setup = setup_handlers({"M": unary(lambda req, ctx: req)})
    ref = same(setup, lambda run: call_unary(run.channel, "/no.Such/Method", b"x"))
    assert ref.brief() == (SC.UNIMPLEMENTED, "Method not found!")


def test_unknown_method_streaming_client():
    setup = setup_handlers({"M": unary(lambda req, ctx: req)})
    ref = same(setup, lambda run: call_stream(run.channel, "/no.Such/Stream", b"x"))
    assert ref.brief() == (SC.UNIMPLEMENTED, "Method not found!")


def test_no_handlers_at_all():
    ref = same(lambda server, state: None, lambda run: call_unary(run.channel, method("M"), b"x"))
    assert ref.brief() == (SC.UNIMPLEMENTED, "Method not found!")


# -- compression calls are accepted ----------------------------------------------


def test_set_compression_and_disable_next_message_compression():
    def handler(req, ctx):
        ctx.set_compression(grpc.Compression.Gzip)
        ctx.disable_next_message_compression()
        yield b"a" * 1000
        yield b"b" * 1000

    ref = _stream_case(handler)
    assert ref.code == SC.OK and ref.responses == (b"a" * 1000, b"b" * 1000)
