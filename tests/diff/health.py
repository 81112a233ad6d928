"""Health-checking scenarios shared by the sync and aio differential suites.

The reference is grpcio-health-checking's servicer on grpcio's server; ours
is pygrpc_native.health.HealthServicer on pygrpc_native's server, which
answers Check and Watch in Go. A setup registers the servicer of the
server's kind and records it in ``state`` under ``"servicer"``; scenarios
change statuses through a *setter* (``set(service, status)`` and
``shutdown()``), since grpcio's aio servicer's methods are coroutines.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, Optional, Tuple

import grpc
from grpc_health.v1 import health as reference
from grpc_health.v1 import health_pb2, health_pb2_grpc

import pygrpc_native.health
from diff.harness import CALL_TIMEOUT

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
UNKNOWN = health_pb2.HealthCheckResponse.UNKNOWN

CHECK = "/grpc.health.v1.Health/Check"
WATCH = "/grpc.health.v1.Health/Watch"


def is_native(server: Any) -> bool:
    return type(server).__module__.startswith("pygrpc_native")


def servicer_for(server: Any) -> Any:
    """The servicer a user of that server would register: ours on ours,
    grpcio-health-checking's on grpcio's, the aio one on aio servers."""
    module = pygrpc_native.health if is_native(server) else reference
    if isinstance(server, grpc.aio.Server):
        return module.aio.HealthServicer()
    return module.HealthServicer()


def health_setup(statuses: Iterable[Tuple[str, int]] = (), servicer_class: Optional[Callable[[], Any]] = None):
    """A setup that registers a health servicer (servicer_class, or the
    server's own kind's) the way generated code does; ``statuses`` are set
    before the server starts (synchronously: for an aio servicer, through
    its table, as nothing can await here)."""

    def setup(server: Any, state: Any) -> None:
        servicer = servicer_class() if servicer_class else servicer_for(server)
        for service, status in statuses:
            if isinstance(servicer, reference.aio.HealthServicer):
                servicer._server_status[service] = status
            else:
                servicer.set(service, status)
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        state.record("servicer", servicer)

    return setup


def check(channel: grpc.Channel, service: str = "", timeout: float = CALL_TIMEOUT) -> Tuple[Any, ...]:
    """(code, details, status or None) of one Check."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        response, call = stub.Check.with_call(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
    except grpc.RpcError as err:
        return (err.code(), err.details(), None)
    return (call.code(), call.details(), response.status)


class Watch:
    """One Watch stream, read a message at a time."""

    def __init__(self, channel: grpc.Channel, service: str = "", timeout: float = CALL_TIMEOUT) -> None:
        stub = health_pb2_grpc.HealthStub(channel)
        self.call = stub.Watch(health_pb2.HealthCheckRequest(service=service), timeout=timeout)

    def next(self) -> Any:
        """The next status, or (code, details) once the stream has ended."""
        try:
            return next(self.call).status
        except StopIteration:
            return (self.call.code(), self.call.details())
        except grpc.RpcError as err:
            return (err.code(), err.details())

    def close(self) -> None:
        self.call.cancel()


class Setter:
    """Changes a servicer's statuses from the test thread: directly, or on
    the server's loop for grpcio's aio servicer."""

    def __init__(self, servicer: Any, on_loop: Optional[Callable[[Any], Any]] = None) -> None:
        self.servicer = servicer
        self.on_loop = on_loop

    def _do(self, result: Any) -> None:
        if self.on_loop is not None and result is not None:
            self.on_loop(result)

    def set(self, service: str, status: int) -> None:
        self._do(self.servicer.set(service, status))

    def shutdown(self) -> None:
        self._do(self.servicer.enter_graceful_shutdown())


def as_scenario(fn: Callable[[grpc.Channel, Setter], Any]) -> Callable[[Any], Any]:
    """fn, a scenario below, as a harness scenario: it gets the run's channel
    and its servicer, changed on the run's loop where the run has one (an
    aio run's ``on_loop``)."""

    def scenario(run: Any) -> Any:
        return fn(run.channel, Setter(run.state.wait_for("servicer"), getattr(run, "on_loop", None)))

    return scenario


# -- scenarios: ``scenario(channel, setter) -> comparable value`` --------------


def checks(channel: grpc.Channel, setter: Setter) -> List[Any]:
    """Statuses set before start, then after, as Check sees them."""
    services = ("", "a", "b", "c", "d", "missing")
    seen = [check(channel, s) for s in services]
    setter.set("a", NOT_SERVING)
    setter.set("missing", SERVING)
    setter.set("", NOT_SERVING)
    seen += [check(channel, s) for s in services]
    return seen


def watch_changes(channel: grpc.Channel, setter: Setter) -> List[Any]:
    """Watch sends the current status, then each change of its own service
    only; an unknown service starts SERVICE_UNKNOWN."""
    seen = []
    known, unknown = Watch(channel, "a"), Watch(channel, "new")
    try:
        seen += [known.next(), unknown.next()]
        setter.set("other", NOT_SERVING)  # neither watcher's service
        setter.set("a", NOT_SERVING)
        seen.append(known.next())
        setter.set("new", SERVING)
        seen.append(unknown.next())
        setter.set("a", SERVING)
        seen.append(known.next())
    finally:
        known.close()
        unknown.close()
    return seen


def graceful_shutdown(channel: grpc.Channel, setter: Setter) -> List[Any]:
    """enter_graceful_shutdown(): every service NOT_SERVING, watchers told,
    later set() calls ignored (a new service stays unknown)."""
    seen = []
    watch = Watch(channel, "a")
    try:
        seen.append(watch.next())
        setter.shutdown()
        seen.append(watch.next())
        setter.set("a", SERVING)
        setter.set("late", SERVING)
        setter.shutdown()  # a second time does nothing
        seen += [check(channel, s) for s in ("", "a", "b", "late")]
    finally:
        watch.close()
    return seen


def graceful_shutdown_told_once(channel: grpc.Channel, setter: Setter) -> List[Any]:
    """A watcher is told NOT_SERVING once by enter_graceful_shutdown(),
    then nothing more until its deadline."""
    watch = Watch(channel, "a", timeout=1.0)
    first = watch.next()
    setter.shutdown()
    return [first, watch.next(), watch.next()[0]]


def watch_deadline(channel: grpc.Channel, setter: Setter) -> List[Any]:
    """A Watch with a deadline: the current status, then DEADLINE_EXCEEDED."""
    watch = Watch(channel, "a", timeout=0.5)
    return [watch.next(), watch.next()[0]]


BEFORE_START = (("a", SERVING), ("b", NOT_SERVING), ("c", SERVICE_UNKNOWN), ("d", UNKNOWN))


def watch_repeats(channel: grpc.Channel, setter: Setter) -> List[Any]:
    """set() of the status a watcher already has, then a change: the sync
    servicers send both, the aio ones only the change."""
    watch = Watch(channel, "a")
    try:
        seen = [watch.next()]
        setter.set("a", SERVING)
        setter.set("a", NOT_SERVING)
        seen.append(watch.next())
        if seen[-1] == SERVING:  # the repeat was sent: the change follows
            seen.append(watch.next())
        return seen
    finally:
        watch.close()
