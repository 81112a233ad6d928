"""Differential tests: grpcio's experimental handler hooks
(test_server_diff_hooks.py describes them) with non-coroutine handlers,
each scenario run on both kinds of server (tests/diff/flavours.py).
grpc.aio.server() reads no hook (the handlers run in its migration thread
pool), and pygrpc_native's servers do as the grpcio server of their kind.
grpcio-health-checking's sync HealthServicer sets both hooks on Watch.
"""

import threading
from concurrent import futures

import grpc
import pytest

from diff.flavours import each_flavour
from diff.harness import WAIT, call_stream, call_unary, method, setup_handlers, stream, unary

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


@each_flavour
@pytest.mark.parametrize("kind", ["unary", "stream"])
@pytest.mark.parametrize("pool_kind", ["ThreadPoolExecutor", "other executor"])
def test_experimental_thread_pool_runs_the_call(flavour, kind, pool_kind):
    own = futures.ThreadPoolExecutor(2, thread_name_prefix="own-pool")

    class OtherExecutor(futures.Executor):
        def submit(self, fn, *args, **kwargs):
            return own.submit(fn, *args, **kwargs)

    def setup(server, state):
        def where():
            return threading.current_thread().name.startswith("own-pool")

        if kind == "unary":

            def behavior(req, ctx):
                return b"own" if where() else b"server"

            handler = unary(behavior)
        else:

            def behavior(req, ctx):
                yield b"own" if where() else b"server"

            handler = stream(behavior)
        behavior.experimental_thread_pool = own if pool_kind == "ThreadPoolExecutor" else OtherExecutor()
        setup_handlers({"M": handler})(server, state)

    call = call_unary if kind == "unary" else call_stream
    try:
        ref = flavour.same(setup, lambda run: call(run.channel, method("M")).responses)
    finally:
        own.shutdown(wait=False)
    assert ref == ((b"own",) if pool_kind == "ThreadPoolExecutor" and not flavour.aio else (b"server",))


@each_flavour
def test_health_watch_streams_status_changes(flavour):
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
        servicer.set("svc", status.NOT_SERVING)
        seen.append(next(call).status)
        call.cancel()
        if flavour.aio:
            # In blocking mode Watch's generator waits in a pool thread, and
            # nothing tells it of the cancel (grpc.aio runs a sync handler's
            # callbacks only when the call completes), so the thread would
            # wait forever and hold up the interpreter's exit: end the
            # generator as the servicer's own close callback does.
            for send_response_callback in list(servicer._send_response_callbacks.get("svc", ())):
                send_response_callback(None)
        check = stub.Check(health_pb2.HealthCheckRequest(service="svc"), timeout=WAIT).status
        return seen, call.code(), check

    ref = flavour.same(setup, scenario)
    assert ref == ([status.SERVICE_UNKNOWN, status.SERVING, status.NOT_SERVING], SC.CANCELLED, status.NOT_SERVING)
