"""Differential tests: grpc.health.v1.Health on grpc.server() with
grpcio-health-checking's servicer and on pygrpc_native.server() with
pygrpc_native.health.HealthServicer (answered in Go), called by grpcio's
health stub: which servicers the server answers natively, which stay
ordinary Python, and what only the sync servers show. The scenarios both
kinds of server share are in test_diff_health.py."""

import threading

import grpc
import pytest
from grpc_health.v1 import health as reference
from grpc_health.v1 import health_pb2, health_pb2_grpc

import pygrpc_native
import pygrpc_native.health
from diff import health as h
from diff.harness import running, same

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


def test_statuses_set_after_shutdown_but_before_start_stay_ignored():
    def setup(server, state):
        h.health_setup(h.BEFORE_START)(server, state)
        servicer = state.wait_for("servicer")
        servicer.enter_graceful_shutdown()
        servicer.set("a", h.SERVING)

    same(setup, lambda run: [h.check(run.channel, s) for s in ("", "a", "b")])


def test_registered_through_a_generic_handler_only():
    """Generated code older than add_registered_method_handlers registers a
    generic handler only: the server learns of the servicer on the first
    call, answered in Python, and answers natively from then on."""

    def setup(server, state):
        servicer = h.servicer_for(server)
        servicer.set("a", h.NOT_SERVING)
        handlers = {
            "Check": grpc.unary_unary_rpc_method_handler(
                servicer.Check,
                request_deserializer=health_pb2.HealthCheckRequest.FromString,
                response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
            ),
            "Watch": grpc.unary_stream_rpc_method_handler(
                servicer.Watch,
                request_deserializer=health_pb2.HealthCheckRequest.FromString,
                response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
            ),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("grpc.health.v1.Health", handlers),))
        state.record("servicer", servicer)

    def scenario(run):
        setter = h.Setter(run.state.wait_for("servicer"))
        seen = [h.check(run.channel, "a"), h.check(run.channel, "a")]
        setter.set("a", h.SERVING)
        return seen + [h.check(run.channel, "a"), h.watch_changes(run.channel, setter)]

    same(setup, scenario)


# -- which servicer is answered natively ---------------------------------------


class _Counting:
    """Counts the Check calls that reach Python."""

    def __init__(self):
        self.lock = threading.Lock()
        self.checks = 0

    def Check(self, request, context):
        with self.lock:
            self.checks += 1
        return super().Check(request, context)


class _CountingReference(_Counting, reference.HealthServicer):
    def __init__(self):
        _Counting.__init__(self)
        reference.HealthServicer.__init__(self)


class _CountingOurs(_Counting, pygrpc_native.health.HealthServicer):
    """Ours with Check overridden: the override is the user's code, so it
    runs, in Python."""

    def __init__(self):
        _Counting.__init__(self)
        pygrpc_native.health.HealthServicer.__init__(self)


@pytest.mark.parametrize("servicer_class", [_CountingReference, _CountingOurs])
def test_servicers_with_python_check_keep_running_in_python(servicer_class):
    def scenario(run):
        servicer = run.state.wait_for("servicer")
        return [h.check(run.channel, ""), h.check(run.channel, "missing"), servicer.checks]

    assert same(h.health_setup(servicer_class=servicer_class), scenario)[-1] == 2


def test_ours_answers_without_python():
    """Our servicer's Check never runs in Python on our server (the GIL and
    busy-worker tests in test_health_native.py show what that buys)."""
    calls = []

    class Spy(pygrpc_native.health.HealthServicer):
        pass

    spy = Spy()
    original = reference.HealthServicer.Check

    def spying(self, request, context):
        calls.append(request.service)
        return original(self, request, context)

    with running("native", lambda server, state: health_pb2_grpc.add_HealthServicer_to_server(spy, server)) as run:
        reference.HealthServicer.Check = spying
        try:
            assert h.check(run.channel, "") == (SC.OK, "", h.SERVING)
        finally:
            reference.HealthServicer.Check = original
    assert calls == []


def test_ours_on_grpc_server_is_grpcio_health_checking():
    """Our servicer is a drop-in elsewhere too: on grpc.server() it behaves
    as grpcio-health-checking's."""

    def outcomes(servicer_class):
        seen = []
        for scenario in (h.checks, h.watch_changes, h.watch_repeats):
            with running("grpcio", h.health_setup(h.BEFORE_START, servicer_class)) as run:
                seen.append(scenario(run.channel, h.Setter(run.state.wait_for("servicer"))))
        return seen

    assert outcomes(pygrpc_native.health.HealthServicer) == outcomes(None)


def test_one_servicer_on_two_servers():
    servicer = pygrpc_native.health.HealthServicer()
    setup = h.health_setup(servicer_class=lambda: servicer)
    with running("native", setup) as first, running("native", setup) as second:
        servicer.set("a", h.NOT_SERVING)
        assert h.check(first.channel, "a") == h.check(second.channel, "a") == (SC.OK, "", h.NOT_SERVING)


def test_set_refuses_what_is_not_a_status():
    servicer = pygrpc_native.health.HealthServicer()
    with pytest.raises(TypeError, match="service must be a str"):
        servicer.set(b"a", h.SERVING)
    with pytest.raises(TypeError):
        servicer.set("a", "SERVING")
    assert "a" not in servicer._server_status


def test_set_refuses_what_the_wire_cannot_carry():
    """A status outside int32, a bool, or a service name that isn't UTF-8
    (README): grpcio-health-checking stores them and fails each Check of
    the service later; ours raised from Go after changing its own table,
    and one such value set before start() left the whole table out of Go
    (every later set() unseen by probes)."""
    servicer = pygrpc_native.health.HealthServicer()
    with pytest.raises(ValueError, match="int32"):
        servicer.set("a", 2**31)
    with pytest.raises(TypeError):
        servicer.set("a", True)
    with pytest.raises(ValueError, match="can't be sent"):
        servicer.set("\udce9", h.SERVING)
    assert "a" not in servicer._server_status and "\udce9" not in servicer._server_status


def test_a_table_entry_go_cannot_hold_leaves_the_others_served():
    """An entry put in the servicer's table without set() that Go can't
    hold: the others are still served, and later changes reach probes."""

    def setup(server, state):
        servicer = pygrpc_native.health.HealthServicer()
        servicer.set("a", h.SERVING)
        servicer._server_status["bad"] = 2**40
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        state.record("servicer", servicer)

    with running("native", setup) as run:
        servicer = run.state.wait_for("servicer")
        servicer.set("a", h.NOT_SERVING)
        servicer.set("b", h.SERVING)
        servicer.enter_graceful_shutdown()
        assert [h.check(run.channel, s) for s in ("a", "b", "")] == [(SC.OK, "", h.NOT_SERVING)] * 3
