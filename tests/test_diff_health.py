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


def _partial_health_setup(service, methods):
    """Registers only ``methods`` of the server's own kind of health
    servicer, under ``service``, as a user writing the handlers by hand."""

    def setup(server, state):
        servicer = h.servicer_for(server)
        kinds = {"Check": grpc.unary_unary_rpc_method_handler, "Watch": grpc.unary_stream_rpc_method_handler}
        handlers = {
            m: kinds[m](
                getattr(servicer, m),
                request_deserializer=health_pb2.HealthCheckRequest.FromString,
                response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
            )
            for m in methods
        }
        server.add_registered_method_handlers(service, handlers)
        state.record("servicer", servicer)

    return setup


@each_flavour
@pytest.mark.parametrize(
    "service,methods",
    [("grpc.health.v1.Health", ("Check",)), ("grpc.health.v1.Health", ("Watch",)), ("my.Health", ("Check", "Watch"))],
    ids=["check-only", "watch-only", "other-name"],
)
def test_only_the_methods_registered_at_their_paths_are_answered(flavour, service, methods):
    """Go answered both standard paths of grpc.health.v1.Health as soon as
    one method of our servicer was served, at any path: a server that
    registered Check only answered Watch too, and one that registered the
    servicer as my.Health answered the standard Check."""

    def scenario(run):
        watch = h.Watch(run.channel, "")
        seen = [h.check(run.channel, ""), watch.next()]
        watch.close()
        other = f"/{service}/Check"
        try:
            seen.append(run.channel.unary_unary(other)(health_pb2.HealthCheckRequest().SerializeToString(), timeout=5))
        except grpc.RpcError as err:
            seen.append((err.code(), err.details()))
        return seen

    seen = flavour.same(_partial_health_setup(service, methods), scenario)
    unimplemented = (SC.UNIMPLEMENTED, "Method not found!")
    serving_bytes = health_pb2.HealthCheckResponse(status=h.SERVING).SerializeToString()
    standard = service == "grpc.health.v1.Health"
    assert seen == [
        (SC.OK, "", h.SERVING) if "Check" in methods and standard else unimplemented + (None,),
        h.SERVING if "Watch" in methods and standard else unimplemented,
        serving_bytes if "Check" in methods else unimplemented,
    ]


@each_flavour
def test_a_watcher_gets_every_status_of_a_burst(flavour):
    """A thousand set() calls at once reach a Watch stream whose client
    reads, every one, as on grpcio (the sync servicer); ours kept 64 and
    dropped older ones. The aio servicer sends changes only: the last."""

    def scenario(run):
        setter = h.Setter(run.state.wait_for("servicer"), getattr(run, "on_loop", None))
        watches = [h.Watch(run.channel, "a", timeout=20) for _ in range(3)]
        firsts = [watch.next() for watch in watches]
        statuses = [h.SERVING, h.NOT_SERVING] * 500
        for status in statuses:
            setter.set("a", status)
        seen = []
        for watch in watches:
            if flavour.aio:
                # changes only, coalesced as the watcher keeps up: how many
                # reach it depends on timing (one or two), on either server
                got = [watch.next()]
                while got[-1] != statuses[-1]:
                    got.append(watch.next())
                seen.append(got[-1])
            else:
                got = [watch.next() for _ in statuses]
                seen.append((len(got), got[-1]))
            watch.close()
        return firsts, seen

    firsts, seen = flavour.same(h.health_setup((("a", h.SERVICE_UNKNOWN),)), scenario)
    assert firsts == [h.SERVICE_UNKNOWN] * 3
    assert seen == ([h.NOT_SERVING] * 3 if flavour.aio else [(1000, h.NOT_SERVING)] * 3)
