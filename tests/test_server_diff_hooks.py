"""Differential tests: grpcio's experimental handler hooks on grpc.server()
and pygrpc_native.server().

grpcio reads two attributes of a handler's behavior (the function):

* ``experimental_thread_pool``: a ThreadPoolExecutor the call runs in,
  instead of the server's pool (any other kind of executor is ignored);
* ``experimental_non_blocking`` (response-streaming methods only): the
  behavior is called with a third argument, ``send_response_callback``,
  which sends a response, or with None ends the call OK. The call stays
  open after the behavior returns, so a stream needs no thread while it
  waits.

grpcio-health-checking's HealthServicer sets both on Watch by default.
experimental_thread_pool and a health Watch, which both kinds of server
serve, are in test_diff_hooks.py.
"""

import threading

import grpc
import pytest

from diff.harness import WAIT, call_stream, call_unary, method, same, setup_handlers, stream, unary

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


# -- experimental_non_blocking -------------------------------------------------------


def _non_blocking_setup(send):
    """A response-streaming method whose behavior is non-blocking and hands
    its callback to send(callback) (in a thread of its own when send says
    so), recording how it was called."""

    def setup(server, state):
        def behavior(req, ctx, send_response_callback=None):
            state.record("mode", "blocking" if send_response_callback is None else "callback")
            if send_response_callback is None:
                return iter([b"blocking"])
            send(send_response_callback)
            return None

        behavior.experimental_non_blocking = True
        setup_handlers({"S": stream(behavior)})(server, state)

    return setup


def _later(callback):
    def run():
        for i in range(3):
            callback(b"r%d" % i)
        callback(None)

    threading.Thread(target=run, daemon=True).start()


def _inline(callback):
    callback(b"first")
    callback(None)


@pytest.mark.parametrize("send", [_later, _inline], ids=["from-another-thread", "in-the-behavior"])
def test_experimental_non_blocking_stream(send):
    def scenario(run):
        return call_stream(run.channel, method("S")), run.state.wait_for("mode")

    ref = same(_non_blocking_setup(send), scenario)
    assert ref[1] == "callback" and ref[0].code == SC.OK


def test_experimental_non_blocking_stream_stays_open_until_ended():
    # The behavior returns at once; the call ends when the callback gets None.
    callbacks = []

    def scenario(run):
        call = run.channel.unary_stream(method("S"))(b"", timeout=WAIT)
        assert run.state.wait_for("mode") == "callback"
        send_response = callbacks.pop()
        send_response(b"late")
        first = next(call)
        send_response(None)
        return first, list(call), call.code()

    ref = same(_non_blocking_setup(callbacks.append), scenario)
    assert ref == (b"late", [], SC.OK)


def test_experimental_non_blocking_behavior_raises():
    def setup(server, state):
        def behavior(req, ctx, send_response_callback=None):
            raise ValueError("nb boom")

        behavior.experimental_non_blocking = True
        setup_handlers({"S": stream(behavior)})(server, state)

    ref = same(setup, lambda run: call_stream(run.channel, method("S")).brief())
    assert ref == (SC.UNKNOWN, "Exception calling application: nb boom")


@pytest.mark.parametrize("value", ["s", 5, bytearray(b"ba")], ids=["str", "int", "bytearray"])
@pytest.mark.parametrize("caught", [True, False], ids=["caught", "uncaught"])
def test_experimental_non_blocking_callback_given_what_is_not_bytes(value, caught):
    """grpcio's callback raises TypeError to its caller for a response
    that isn't bytes (no serializer): a behavior that catches it goes on.
    Ours ended the call UNKNOWN at once and returned: the behavior went
    on unaware, and what it sent later was lost."""

    def setup(server, state):
        def behavior(req, ctx, send_response_callback=None):
            send_response_callback(b"1")
            try:
                send_response_callback(value)
            except TypeError as err:
                state.record("raised", str(err))
                if not caught:
                    raise
            send_response_callback(b"3")
            send_response_callback(None)

        behavior.experimental_non_blocking = True
        setup_handlers({"S": stream(behavior)})(server, state)

    def scenario(run):
        out = call_stream(run.channel, method("S"))
        return out.code, out.details, out.responses, run.state.wait_for("raised")

    wanted = f"Argument 'message' has incorrect type (expected bytes, got {type(value).__name__})"
    assert same(setup, scenario) == (
        (SC.OK, "", (b"1", b"3"), wanted) if caught else (SC.UNKNOWN, "Exception calling application: " + wanted, (b"1",), wanted)
    )


def test_experimental_non_blocking_is_ignored_for_unary_methods():
    def setup(server, state):
        def behavior(req, ctx, send_response_callback=None):
            return b"callback" if send_response_callback else b"plain"

        behavior.experimental_non_blocking = True
        setup_handlers({"M": unary(behavior)})(server, state)

    assert same(setup, lambda run: call_unary(run.channel, method("M")).responses) == (b"plain",)


# -- grpcio-health-checking ----------------------------------------------------------


def _health_setup(server, state):
    health = pytest.importorskip("grpc_health.v1.health")
    health_pb2_grpc = pytest.importorskip("grpc_health.v1.health_pb2_grpc")
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    setup_handlers({"Echo": unary(lambda req, ctx: req)})(server, state)
    state.record("servicer", servicer)


def test_health_watches_hold_no_server_thread():
    # Non-blocking Watch streams wait without a thread: with a one-thread
    # pool, calls are still served while streams are open.
    health_pb2 = pytest.importorskip("grpc_health.v1.health_pb2")
    health_pb2_grpc = pytest.importorskip("grpc_health.v1.health_pb2_grpc")

    def scenario(run):
        stub = health_pb2_grpc.HealthStub(run.channel)
        watches = [stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=WAIT) for _ in range(3)]
        first = [next(w).status for w in watches]
        echo = call_unary(run.channel, method("Echo"), b"still served", timeout=2)
        for w in watches:
            w.cancel()
        return first, echo.code, echo.responses

    serving = health_pb2.HealthCheckResponse.SERVING
    assert same(_health_setup, scenario, workers=1) == ([serving] * 3, SC.OK, (b"still served",))


def test_experimental_non_blocking_context_read_after_the_answer():
    """The thread that answers a non-blocking behavior's call reads the
    call's metadata and peer from the context once it has ended it, as on
    grpcio (ours read none: Go had let go of the call)."""

    def setup(server, state):
        def behavior(req, ctx, send_response_callback):
            def run():
                send_response_callback(b"r")
                send_response_callback(None)
                state.event("answered").wait(WAIT)
                md = [tuple(m) for m in ctx.invocation_metadata() if m[0] == "x-who"]
                state.record("seen", (md, ctx.peer().split(":")[0]))

            threading.Thread(target=run, daemon=True).start()

        behavior.experimental_non_blocking = True
        setup_handlers({"S": stream(behavior)})(server, state)

    def scenario(run):
        out = call_stream(run.channel, method("S"), metadata=[("x-who", "me")])
        run.state.event("answered").set()
        return out.code, out.responses, run.state.wait_for("seen")

    assert same(setup, scenario) == (SC.OK, (b"r",), ([("x-who", "me")], "ipv4"))
