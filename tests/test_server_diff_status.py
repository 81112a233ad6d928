"""Differential tests: status codes and details that only a sync handler can
produce (plain functions returning iterators, sync-only context methods),
grpc.server() against pygrpc_native.server(). The scenarios both kinds of
server share are in test_diff_status.py.

Each test runs one servicer on both servers with the same grpcio client and
asserts the client observed the same thing (tests/diff/harness.py). Where
grpcio's outcome is part of the contract, the test pins it too.
"""

import logging
import time

import grpc
import pytest

from diff import TRANSPORT, status_details
from diff.flavours import SYNC
from diff.harness import both, call_stream, call_unary, method, same, setup_handlers, stream, unary

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


# -- what a stream handler returns ------------------------------------------------


def test_server_stream_plain_iterator_no_messages():
    ref = SYNC.stream_case(lambda req, ctx: iter(()))
    assert ref.code == SC.OK and ref.responses == ()


def test_server_stream_handler_returns_list():
    # grpcio calls next() on what the handler returns: a list is not an iterator.
    ref = SYNC.stream_case(lambda req, ctx: [b"a", b"b"])
    assert ref.code == SC.UNKNOWN


# -- exceptions ----------------------------------------------------------------


def _raise(exc):
    def handler(req, ctx):
        raise exc

    return handler


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no str for you")


def test_unary_handler_unprintable_exception(caplog, capsys):
    """Logged as grpcio logs it: the traceback (a list of lines), then the
    details, both under grpc._server; the traceback of the failed str() is
    printed to stderr too (ours logged the details only)."""

    def scenario(run):
        caplog.clear()
        capsys.readouterr()
        with caplog.at_level(logging.ERROR, logger="grpc._server"):
            brief = call_unary(run.channel, method("M")).brief()
            time.sleep(0.1)
        records = [(type(r.msg).__name__, str(r.msg)[-40:]) for r in caplog.records if r.name == "grpc._server"]
        return brief, records, "no str for you" in capsys.readouterr().err

    ref = same(setup_handlers({"M": unary(_raise(_Unprintable()))}), scenario)
    assert ref[0] == (SC.UNKNOWN, "Calling application raised unprintable Exception!")
    assert [kind for kind, _ in ref[1]] == ["list", "str"] and ref[2] is True


def test_stream_handler_exception_before_iterator():
    ref = SYNC.stream_case(_raise(ValueError("early")))
    assert ref.brief() == (SC.UNKNOWN, "Exception calling application: early")


def test_stream_exception_on_first_next():
    def handler(req, ctx):
        raise ValueError("first")
        yield b"never"  # noqa: unreachable - makes this a generator

    ref = SYNC.stream_case(handler)
    assert ref.brief() == (SC.UNKNOWN, "Exception iterating responses: first")


@pytest.mark.parametrize("value", [bytearray(b"ba"), memoryview(b"mv")], ids=["bytearray", "memoryview"])
def test_known_difference_bytes_like_response(value):
    # Without a serializer, grpc.server() fails on a response that is bytes-
    # like but not bytes, and never answers the call; ours sends it (README:
    # known differences).
    setup = setup_handlers({"M": unary(lambda req, ctx: value)})
    ref, ours = both(setup, lambda run: call_unary(run.channel, method("M"), timeout=1))
    assert ref.code == SC.DEADLINE_EXCEEDED
    assert (ours.code, ours.responses) == (SC.OK, (bytes(value),))


def _generator(req, ctx):
    yield b"a generator"


@pytest.mark.parametrize(
    "kind,handler,error",
    [
        ("unary", lambda req, ctx: "text", "payload must be bytes-like, not <class 'str'>"),
        ("unary", lambda req, ctx: 5, "payload must be bytes-like, not <class 'int'>"),
        ("unary", _generator, "payload must be bytes-like, not <class 'generator'>"),
        ("stream", lambda req, ctx: iter(["text"]), "payload must be bytes-like, not <class 'str'>"),
        (
            "unary",
            lambda req, ctx: ctx.set_trailing_metadata((("k", 5),)) or b"resp",
            "metadata values must be str or bytes-like, not <class 'int'>",
        ),
        (
            "unary",
            lambda req, ctx: ctx.set_trailing_metadata({"k": "v"}) or b"resp",
            "metadata entries must be (key, value) pairs, got 'k'",
        ),
    ],
    ids=["str", "int", "unary-generator", "str-in-stream", "int-metadata-value", "metadata-dict"],
)
def test_known_difference_answer_that_cannot_be_sent(kind, handler, error):
    # Without a serializer, grpc.server() fails to send a response that isn't
    # bytes-like, or trailing metadata of the wrong types, logs the error and
    # never answers the call: the client waits out its deadline. Ours ends
    # the call at once as grpc.aio does, UNKNOWN with the error (README:
    # known differences). Ours used to wait as grpcio's (the response that
    # streams excepted, UNKNOWN "Unexpected server error").
    setup = setup_handlers({"M": (unary if kind == "unary" else stream)(handler)})
    call = call_unary if kind == "unary" else call_stream
    ref, ours = both(setup, lambda run: call(run.channel, method("M"), timeout=1))
    assert ref.code == SC.DEADLINE_EXCEEDED
    assert (ours.code, ours.details, ours.responses) == (SC.UNKNOWN, f"Unexpected <class 'TypeError'>: {error}", ())


def test_details_that_are_not_utf8():
    # Details set as bytes go as they are (percent-encoded on the wire); a
    # grpcio client reads bytes that aren't UTF-8 as Latin-1. Ours used to
    # replace them with U+FFFD, as grpc-go's transport still does (README).
    def handler(req, ctx):
        ctx.set_code(SC.NOT_FOUND)
        ctx.set_details(b"\xff\xfe caf\xc3\xa9")
        return b"resp"

    ref, ours = both(setup_handlers({"M": unary(handler)}), lambda run: call_unary(run.channel, method("M")).brief())
    assert ref == (SC.NOT_FOUND, b"\xff\xfe caf\xc3\xa9".decode("latin-1"))
    assert ours == (ref if TRANSPORT == "h2" else (SC.NOT_FOUND, "\ufffd\ufffd caf\xe9"))


# -- abort ---------------------------------------------------------------------


def test_abort_in_stream_before_iterator():
    def handler(req, ctx):
        ctx.abort(SC.PERMISSION_DENIED, "no stream")

    ref = SYNC.stream_case(handler)
    assert ref.brief() == (SC.PERMISSION_DENIED, "no stream")


@pytest.mark.parametrize("then", ["raise", "abort again", "return"])
def test_abort_seen_by_an_interceptor_that_catches_it(then):
    # abort() raises a bare Exception on grpc.server(): an interceptor that
    # catches exceptions around the handler sees (and logs) that type; a
    # second abort() there replaces the status, a return leaves the first.
    caught = []  # written on the handler's thread before the call's status is sent

    class Catching(grpc.ServerInterceptor):
        def intercept_service(self, continuation, details):
            inner = continuation(details).unary_unary

            def wrapped(req, ctx):
                try:
                    return inner(req, ctx)
                except Exception as exc:
                    caught.append((type(exc) is Exception, repr(exc), str(exc)))
                    if then == "abort again":
                        ctx.abort(SC.INTERNAL, "wrapped")
                    if then == "return":
                        return b"swallowed"
                    raise

            return grpc.unary_unary_rpc_method_handler(wrapped)

    def handler(req, ctx):
        ctx.abort(SC.PERMISSION_DENIED, "no")

    def scenario(run):
        return call_unary(run.channel, method("M")).brief(), caught.pop()

    ref = same(setup_handlers({"M": unary(handler)}), scenario, interceptors=[Catching()])
    assert ref[1] == (True, "Exception()", "")
    assert ref[0] == ((SC.INTERNAL, "wrapped") if then == "abort again" else (SC.PERMISSION_DENIED, "no"))


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


def test_set_details_bytes():
    def handler(req, ctx):
        ctx.set_code(SC.INTERNAL)
        ctx.set_details(b"bytes details")
        return b""

    ref = SYNC.unary_case(handler)
    assert ref.brief() == (SC.INTERNAL, "bytes details")


# -- None responses and (de)serializers -------------------------------------------


def test_unary_returns_none_with_code_ok():
    def handler(req, ctx):
        ctx.set_code(SC.OK)

    SYNC.unary_case(handler)


def test_request_deserializer_returns_none():
    ref = SYNC.unary_case(lambda req, ctx: b"ran", request_deserializer=lambda data: None)
    assert ref.code == SC.INTERNAL


def test_request_stream_ends_at_a_message_the_deserializer_refuses():
    """The call ends INTERNAL at the refused message, and the handler's
    loop over its requests just ends there, as on grpcio, so the code
    after it runs (ours raised grpc.RpcError into the handler); the
    iterator stays ended for a thread reading it after the handler
    returned."""

    def deserialize(data):
        if data == b"bad":
            raise ValueError("refused")
        return data

    def setup(server, state):
        def handler(requests, ctx):
            got = [r for r in requests]
            state.record("got", (got, ctx.is_active()))
            state.record("again", list(requests))
            return b"r"

        handlers = {"C": grpc.stream_unary_rpc_method_handler(handler, request_deserializer=deserialize)}
        setup_handlers(handlers)(server, state)

    def scenario(run):
        try:
            run.channel.stream_unary(method("C"))(iter([b"a", b"bad", b"c"]), timeout=5)
            outcome = "ok"
        except grpc.RpcError as err:
            outcome = (err.code(), err.details())
        return outcome, run.state.wait_for("got"), run.state.wait_for("again")

    ref = same(setup, scenario)
    assert ref == ((SC.INTERNAL, "Exception deserializing request!"), ([b"a"], False), [])


def test_failing_response_serializer_with_code_set():
    def serialize(obj):
        raise TypeError("cannot serialize")

    def handler(req, ctx):
        ctx.set_code(SC.CANCELLED)
        return req

    SYNC.unary_case(handler, response_serializer=serialize)


def test_handler_failures_are_logged_where_grpcio_logs_them(caplog):
    """Under grpcio's loggers and in its words (logging set up for grpcio
    keeps working after the switch; ours logged under pygrpc_native)."""

    def failing_deserializer(data):
        raise ValueError("undecodable")

    def setup(server, state):
        def handler(req, ctx):
            ctx.add_callback(lambda: 1 / 0)
            raise RuntimeError("handler boom")

        handlers = {
            "Boom": grpc.unary_unary_rpc_method_handler(handler),
            "Undecodable": grpc.unary_unary_rpc_method_handler(lambda req, ctx: b"", request_deserializer=failing_deserializer),
        }
        setup_handlers(handlers)(server, state)

    def scenario(run):
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="grpc._server"), caplog.at_level(logging.ERROR, logger="grpc._common"):
            codes = [call_unary(run.channel, method(name)).code for name in ("Boom", "Undecodable")]
            time.sleep(0.2)  # the callback runs after the answer
        return codes, sorted({(r.name, r.getMessage()) for r in caplog.records if r.name.startswith("grpc.")})

    ref = same(setup, scenario)
    assert ref == (
        [SC.UNKNOWN, SC.INTERNAL],
        [
            ("grpc._common", "Exception deserializing message!"),
            ("grpc._server", "Exception calling application: handler boom"),
            ("grpc._server", "Exception calling callback!"),
        ],
    )
