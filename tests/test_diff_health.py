"""Differential tests: grpc.health.v1.Health, grpcio-health-checking's
servicer on grpcio's servers against pygrpc_native.health's (answered in
Go) on ours, called by grpcio's health stub; each scenario
(tests/diff/health.py) run on both kinds of server
(tests/diff/flavours.py). What only one kind shows is in
test_server_diff_health.py and test_aio_diff_health.py."""

import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from diff import health as h
from diff.flavours import each_flavour, each_flavour_and_uvloop
from diff.harness import call_unary

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


@each_flavour_and_uvloop
def test_check(flavour):
    seen = flavour.same(h.health_setup(h.BEFORE_START), h.as_scenario(h.checks))
    assert seen[0] == (SC.OK, "", h.SERVING)
    assert seen[5] == (SC.NOT_FOUND, "", None)


@each_flavour_and_uvloop
def test_watch_sends_the_current_status_then_each_change(flavour):
    seen = flavour.same(h.health_setup(h.BEFORE_START), h.as_scenario(h.watch_changes))
    assert seen == [h.SERVING, h.SERVICE_UNKNOWN, h.NOT_SERVING, h.SERVING, h.SERVING]


@each_flavour
def test_watch_and_a_repeated_status(flavour):
    # The sync servicer sends every set(), the aio one only changes.
    seen = flavour.same(h.health_setup(h.BEFORE_START), h.as_scenario(h.watch_repeats))
    assert seen == flavour.pick(sync=[h.SERVING, h.SERVING, h.NOT_SERVING], aio=[h.SERVING, h.NOT_SERVING])


@each_flavour
def test_enter_graceful_shutdown(flavour):
    seen = flavour.same(h.health_setup(h.BEFORE_START), h.as_scenario(h.graceful_shutdown))
    assert seen[:2] == [h.SERVING, h.NOT_SERVING]
    assert seen[-1] == (SC.NOT_FOUND, "", None)


@each_flavour
def test_enter_graceful_shutdown_tells_a_watcher_once(flavour):
    # The sync servicer told its Go watchers NOT_SERVING twice (once by
    # each set() grpcio's shutdown makes, once by the front's shutdown).
    seen = flavour.same(h.health_setup(h.BEFORE_START), h.as_scenario(h.graceful_shutdown_told_once))
    assert seen == [h.SERVING, h.NOT_SERVING, SC.DEADLINE_EXCEEDED]


@each_flavour
def test_watch_deadline(flavour):
    seen = flavour.same(h.health_setup(h.BEFORE_START), h.as_scenario(h.watch_deadline))
    assert seen == [h.SERVING, SC.DEADLINE_EXCEEDED]


@each_flavour
def test_watch_open_when_the_grace_passes(flavour):
    # A stop's grace passes with a Watch open: grpcio ends it then, as every
    # call left, UNAVAILABLE "Cancelling all calls". Ours ended it when the
    # transport closed its connection, 250 ms later, with a GOAWAY's words.
    grace = 0.3

    def scenario(run):
        watch = h.Watch(run.channel, "a")
        first = watch.next()
        begun = time.monotonic()
        if flavour.aio:
            threading.Thread(target=run.on_loop, args=(run.server.stop(grace),), daemon=True).start()
        else:
            run.server.stop(grace)
        ended = watch.next()
        return first, ended, time.monotonic() - begun < grace + 0.2

    seen = flavour.same(h.health_setup(h.BEFORE_START), scenario)
    assert seen == (h.SERVING, (SC.UNAVAILABLE, "Cancelling all calls"), True)


@each_flavour
def test_list_stays_a_python_method(flavour):
    # grpcio-health-checking's servicer doesn't implement List; neither
    # answer differs from the base class's UNIMPLEMENTED.
    def scenario(run):
        stub = health_pb2_grpc.HealthStub(run.channel)
        try:
            stub.List(health_pb2.HealthListRequest(), timeout=5)
        except grpc.RpcError as err:
            return (err.code(), err.details())
        return "answered"

    details = flavour.pick(
        sync="Method not implemented!", aio="Unexpected <class 'NotImplementedError'>: Method not implemented!"
    )
    assert flavour.same(h.health_setup(), scenario) == (SC.UNIMPLEMENTED, details)


@each_flavour
@pytest.mark.parametrize("request_bytes", [b"\x0a\x05ab", b"\x0a\x01\xff"], ids=["truncated", "bad-utf8"])
def test_undecodable_request(flavour, request_bytes):
    """Go answers a request it can't decode as grpc.server() does. Known
    difference (README: Health checks): grpc.aio reports the parser's
    exception instead."""

    def scenario(run):
        return [call_unary(run.channel, h.CHECK, request_bytes).brief(), h.check(run.channel, "a")]

    ref, ours = flavour.both(h.health_setup(h.BEFORE_START), scenario)
    assert ours[0] == (SC.INTERNAL, "Exception deserializing request!")
    assert ours[1] == ref[1] == (SC.OK, "", h.SERVING)
    if flavour.aio:
        assert ref[0][0] == SC.UNKNOWN and ref[0][1].startswith("Unexpected <class 'google.protobuf.message.DecodeError'>")
    else:
        assert ours == ref
