"""Differential tests: grpc.health.v1.Health on grpc.aio.server() with
grpcio-health-checking's aio servicer and on pygrpc_native.aio.server() with
pygrpc_native.health.HealthServicer (answered in Go), called by grpcio's
health stub, for what only the aio servers show (the sync servicer on
them). The scenarios both kinds of server share are in test_diff_health.py."""

import asyncio

import grpc
import pytest
from grpc_health.v1 import health as reference

import pygrpc_native.health

from diff import health as h
from diff.aio_harness import running, same

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


def _sync_servicer_setup(server, state):
    module = pygrpc_native.health if h.is_native(server) else reference
    h.health_setup(h.BEFORE_START, module.HealthServicer)(server, state)


def test_the_sync_servicer_on_aio_servers():
    """grpcio-health-checking's sync servicer also serves grpc.aio; ours,
    answered in Go, gives the same answers."""
    same(_sync_servicer_setup, h.as_scenario(h.checks))


def test_the_sync_servicers_watch_on_our_aio_server():
    """Its Watch too, with the sync servicer's semantics (every set() is
    sent). Not compared with grpc.aio, where the sync servicer's Watch ties
    up a worker thread for good: a client cancel doesn't end it, and the
    process then can't exit."""
    with running("native", _sync_servicer_setup) as run:
        setter = h.Setter(run.state.wait_for("servicer"))
        assert h.watch_changes(run.channel, setter) == [h.SERVING, h.SERVICE_UNKNOWN, h.NOT_SERVING, h.SERVING, h.SERVING]
        setter.set("a", h.SERVING)
        assert h.watch_repeats(run.channel, setter) == [h.SERVING, h.SERVING, h.NOT_SERVING]
        assert h.graceful_shutdown(run.channel, setter)[:2] == [h.NOT_SERVING, h.NOT_SERVING]


def test_ours_on_grpc_aio_server_is_grpcio_health_checking():
    """Our aio servicer is a drop-in elsewhere too: on grpc.aio.server() it
    behaves as grpcio-health-checking's."""

    def outcomes(servicer_class):
        seen = []
        for scenario in (h.checks, h.watch_changes, h.watch_repeats):
            with running("grpcio", h.health_setup(h.BEFORE_START, servicer_class)) as run:
                seen.append(scenario(run.channel, h.Setter(run.state.wait_for("servicer"), run.on_loop)))
        return seen

    assert outcomes(pygrpc_native.health.aio.HealthServicer) == outcomes(None)


def test_set_refuses_what_is_not_a_status():
    servicer = pygrpc_native.health.aio.HealthServicer()
    with pytest.raises(TypeError, match="service must be a str"):
        asyncio.run(servicer.set(b"a", h.SERVING))
    with pytest.raises(TypeError, match="ServingStatus"):
        asyncio.run(servicer.set("a", "SERVING"))
    assert "a" not in servicer._server_status
