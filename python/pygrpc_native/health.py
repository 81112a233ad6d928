"""grpc.health.v1.Health answered in Go: probes that never wait for Python.

:class:`HealthServicer` is a drop-in for grpcio-health-checking's
``grpc_health.v1.health.HealthServicer``: the same constructor, ``set()``,
``enter_graceful_shutdown()`` and status values, registered the same way
(``health_pb2_grpc.add_HealthServicer_to_server(servicer, server)``). On
``pygrpc_native.server()`` and ``pygrpc_native.aio.server()`` the server
recognizes it and answers ``Check`` and ``Watch`` from a status table in Go
that ``set()`` updates, so a probe is answered while handlers hold the GIL or
every worker is busy. On any other server (``grpc.server()``) it is
grpcio-health-checking's servicer, unchanged.

grpcio-health-checking must be installed (it provides the generated code
that registers the service).
"""

from __future__ import annotations

import operator
import threading
import weakref
from typing import Any, Callable, Optional

try:
    from grpc_health.v1 import health as _reference
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(
        "pygrpc_native.health needs grpcio-health-checking: pip install grpcio-health-checking"
    ) from err

from ._core import NATIVE_HEALTH_MARK
from ._front import NativeGrpcFront

SERVICE_NAME: str = _reference.SERVICE_NAME
"""The service's full name, "grpc.health.v1.Health"."""
OVERALL_HEALTH: str = _reference.OVERALL_HEALTH
"""The service name of the whole server's status, ""."""

class HealthServicer(_reference.HealthServicer):
    """grpcio-health-checking's servicer whose statuses also live in Go.

    Invariant: every front this servicer is served on holds the same
    statuses and shutdown state as the servicer itself. Both change only
    under the servicer's lock, the front's table first being filled from the
    servicer's when the server takes it on.
    """

    _lock: threading.RLock
    _server_status: dict
    _gracefully_shutting_down: bool

    def __init__(
        self, experimental_non_blocking: bool = True, experimental_thread_pool: Optional[Any] = None
    ) -> None:
        super().__init__(experimental_non_blocking, experimental_thread_pool)
        self._fronts: "weakref.WeakSet[NativeGrpcFront]" = weakref.WeakSet()

    # Check and Watch run in Python only on servers that don't know this
    # servicer (grpc.server()), or on ours for the first call of a server
    # that learned of it through a generic handler alone.
    def Check(self, request: Any, context: Any) -> Any:
        return super().Check(request, context)

    def Watch(self, request: Any, context: Any, send_response_callback: Optional[Callable[..., Any]] = None) -> Any:
        return super().Watch(request, context, send_response_callback)

    setattr(Check, NATIVE_HEALTH_MARK, True)
    setattr(Watch, NATIVE_HEALTH_MARK, True)

    def set(self, service: str, status: int) -> None:
        """Sets the status of a service ("" for the whole server); Watch
        streams of that service get it at once. Ignored after
        enter_graceful_shutdown()."""
        if not isinstance(service, str):
            raise TypeError(f"service must be a str, not {type(service).__name__}")
        status = operator.index(status)
        with self._lock:
            if self._gracefully_shutting_down:
                return
            super().set(service, status)
            for front in list(self._fronts):
                self._push(front, lambda: front.set_health(service, status))

    def enter_graceful_shutdown(self) -> None:
        """Sets every service NOT_SERVING, for good: later set() calls are
        ignored."""
        with self._lock:
            super().enter_graceful_shutdown()
            for front in list(self._fronts):
                self._push(front, front.enter_health_shutdown)

    def _push(self, front: NativeGrpcFront, change: Callable[[], None]) -> None:
        try:
            change()
        except RuntimeError:
            self._fronts.discard(front)  # the front is closed: its server is gone

    def _serve_on(self, front: NativeGrpcFront) -> None:
        """Answers Check and Watch on front in Go from now on, with this
        servicer's statuses."""
        with self._lock:
            front.enable_health()
            for service, status in self._server_status.items():
                front.set_health(service, status)
            if self._gracefully_shutting_down:
                front.enter_health_shutdown()
            self._fronts.add(front)


def native_servicer(behavior: Any) -> Optional[HealthServicer]:
    """The HealthServicer whose Check or Watch ``behavior`` is, if it can be
    answered in Go: a subclass that overrides either method has Python code
    to run, so both stay in Python, with the state they share."""
    servicer = getattr(behavior, "__self__", None)
    if not isinstance(servicer, HealthServicer):
        return None
    cls = type(servicer)
    if all(getattr(getattr(cls, name), NATIVE_HEALTH_MARK, False) for name in ("Check", "Watch")):
        return servicer
    return None


__all__ = ["OVERALL_HEALTH", "SERVICE_NAME", "HealthServicer"]
