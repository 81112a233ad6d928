"""Differential tests: grpc.health.v1.Health on grpc.aio.server() with
grpcio-health-checking's aio servicer and on pygrpc_native.aio.server() with
pygrpc_native.health.HealthServicer (answered in Go), called by grpcio's
health stub. The scenarios are the sync suite's (tests/diff/health.py)."""

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from diff import health as h
from diff.aio_harness import LOOPS, both, call_unary, same

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


def _scenario(fn):
    """A health scenario as a harness scenario; grpc.aio's servicer is
    changed on its server's loop."""

    def scenario(run):
        return fn(run.channel, h.Setter(run.state.wait_for("servicer"), run.on_loop))

    return scenario


@pytest.mark.parametrize("loop", LOOPS)
def test_check(loop):
    seen = same(h.health_setup(h.BEFORE_START), _scenario(h.checks), loop=loop)
    assert seen[0] == (SC.OK, "", h.SERVING)
    assert seen[5] == (SC.NOT_FOUND, "", None)


@pytest.mark.parametrize("loop", LOOPS)
def test_watch_sends_the_current_status_then_each_change(loop):
    seen = same(h.health_setup(h.BEFORE_START), _scenario(h.watch_changes), loop=loop)
    assert seen == [h.SERVING, h.SERVICE_UNKNOWN, h.NOT_SERVING, h.SERVING, h.SERVING]


def test_enter_graceful_shutdown():
    seen = same(h.health_setup(h.BEFORE_START), _scenario(h.graceful_shutdown))
    assert seen[:2] == [h.SERVING, h.NOT_SERVING]
    assert seen[-1] == (SC.NOT_FOUND, "", None)


def test_watch_deadline():
    assert same(h.health_setup(h.BEFORE_START), _scenario(h.watch_deadline)) == [h.SERVING, SC.DEADLINE_EXCEEDED]


def test_known_difference_undecodable_request():
    """Go answers a request it can't decode as grpc.server() does; grpc.aio
    reports the parser's exception instead (README: Health checks)."""

    def scenario(run):
        return [call_unary(run.channel, h.CHECK, b"\x0a\x05ab").brief(), h.check(run.channel, "a")]

    ref, ours = both(h.health_setup(h.BEFORE_START), scenario)
    assert ref[0][0] == SC.UNKNOWN and ref[0][1].startswith("Unexpected <class 'google.protobuf.message.DecodeError'>")
    assert ours[0] == (SC.INTERNAL, "Exception deserializing request!")
    assert ours[1] == ref[1] == (SC.OK, "", h.SERVING)


def test_list_stays_a_python_method():
    def scenario(run):
        stub = health_pb2_grpc.HealthStub(run.channel)
        try:
            stub.List(health_pb2.HealthListRequest(), timeout=5)
        except grpc.RpcError as err:
            return (err.code(), err.details())
        return "answered"

    assert same(h.health_setup(), scenario) == (
        SC.UNIMPLEMENTED,
        "Unexpected <class 'NotImplementedError'>: Method not implemented!",
    )
