"""Differential tests: grpcio's experimental handler hooks
(tests/test_server_diff_hooks.py) on grpc.aio.server() and
pygrpc_native.aio.server(), with non-coroutine handlers, which run in the
migration thread pool: grpc.aio doesn't read the hooks, and neither does
pygrpc_native.aio.server()."""

import threading
from concurrent import futures

import grpc
import pytest

from diff.aio_harness import WAIT, call_stream, call_unary, method, same, setup_handlers, stream, unary

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


def test_experimental_thread_pool_is_not_used():
    own = futures.ThreadPoolExecutor(1, thread_name_prefix="own-pool")

    def setup(server, state):
        def behavior(req, ctx):
            return b"own" if threading.current_thread().name.startswith("own-pool") else b"migration pool"

        behavior.experimental_thread_pool = own
        setup_handlers({"M": unary(behavior)})(server, state)

    try:
        ref = same(setup, lambda run: call_unary(run.channel, method("M")).responses)
    finally:
        own.shutdown(wait=False)
    assert ref == (b"migration pool",)


def test_experimental_non_blocking_is_not_used():
    def setup(server, state):
        def behavior(req, ctx, send_response_callback=None):
            if send_response_callback is not None:
                send_response_callback(b"callback")
                send_response_callback(None)
                return None
            return iter([b"blocking"])

        behavior.experimental_non_blocking = True
        setup_handlers({"S": stream(behavior)})(server, state)

    ref = same(setup, lambda run: call_stream(run.channel, method("S")))
    assert ref.responses == (b"blocking",)


def test_health_watch_streams_status_changes():
    health = pytest.importorskip("grpc_health.v1.health")
    health_pb2 = pytest.importorskip("grpc_health.v1.health_pb2")
    health_pb2_grpc = pytest.importorskip("grpc_health.v1.health_pb2_grpc")
    status = health_pb2.HealthCheckResponse

    def setup(server, state):
        servicer = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        state.record("servicer", servicer)

    def scenario(run):
        servicer = run.state.wait_for("servicer")
        stub = health_pb2_grpc.HealthStub(run.channel)
        call = stub.Watch(health_pb2.HealthCheckRequest(service="svc"), timeout=WAIT)
        seen = [next(call).status]
        servicer.set("svc", status.SERVING)
        seen.append(next(call).status)
        call.cancel()
        # In blocking mode Watch's generator waits in a pool thread, and
        # nothing tells it of the cancel (grpc.aio runs a sync handler's
        # callbacks only when the call completes), so the thread would wait
        # forever and hold up the interpreter's exit: end the generator as
        # the servicer's own close callback does.
        for send_response_callback in list(servicer._send_response_callbacks.get("svc", ())):
            send_response_callback(None)
        return seen, call.code()

    assert same(setup, scenario) == ([status.SERVICE_UNKNOWN, status.SERVING], SC.CANCELLED)
