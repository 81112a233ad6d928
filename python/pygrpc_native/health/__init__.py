"""grpc.health.v1.Health answered in Go: probes that never wait for Python.

:class:`HealthServicer` is a drop-in for grpcio-health-checking's
``grpc_health.v1.health.HealthServicer``, and ``aio.HealthServicer`` for
``grpc_health.v1.health.aio.HealthServicer``: the same constructors,
``set()``, ``enter_graceful_shutdown()`` and status values, registered the
same way (``health_pb2_grpc.add_HealthServicer_to_server(servicer,
server)``). On ``pygrpc_native.server()`` and ``pygrpc_native.aio.server()``
the server recognizes them and answers ``Check`` and ``Watch`` from a status
table in Go that ``set()`` updates, so a probe is answered while handlers
hold the GIL or every worker is busy. On any other server (``grpc.server()``)
they are grpcio-health-checking's servicers, unchanged.

grpcio-health-checking must be installed (it provides the generated code
that registers the service).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

try:
    from grpc_health.v1 import health as _reference
    from grpc_health.v1 import health_pb2
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("pygrpc_native.health needs grpcio-health-checking: pip install grpcio-health-checking") from err

from ._shared import NativeHealth, checked, mark_native

_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

SERVICE_NAME: str = _reference.SERVICE_NAME
"""The service's full name, "grpc.health.v1.Health"."""
OVERALL_HEALTH: str = _reference.OVERALL_HEALTH
"""The service name of the whole server's status, ""."""


class HealthServicer(NativeHealth, _reference.HealthServicer):
    """grpcio-health-checking's servicer whose statuses also live in Go.
    Watch streams get every set() of their service, as with grpcio's (up to
    4,096 waiting for a client that reads slower than set() is called; past
    that the oldest are dropped, the latest always sent)."""

    _lock: Any
    _server_status: Dict[str, int]
    _gracefully_shutting_down: bool

    def __init__(
        self, experimental_non_blocking: bool = True, experimental_thread_pool: Optional[Any] = None
    ) -> None:
        _reference.HealthServicer.__init__(self, experimental_non_blocking, experimental_thread_pool)
        self._init_native(self._lock)

    # Check and Watch run in Python only on servers that don't know this
    # servicer (grpc.server()), or on ours for the first call of a server
    # that learned of it through a generic handler alone.
    @mark_native
    def Check(self, request: Any, context: Any) -> Any:
        return super().Check(request, context)

    @mark_native
    def Watch(self, request: Any, context: Any, send_response_callback: Optional[Callable[..., Any]] = None) -> Any:
        return super().Watch(request, context, send_response_callback)

    def set(self, service: str, status: int) -> None:
        """Sets the status of a service ("" for the whole server); Watch
        streams of that service get it at once. Ignored after
        enter_graceful_shutdown()."""
        service, status = checked(service, status)
        with self._lock:
            if self._gracefully_shutting_down:
                return
            super().set(service, status)
            self._publish(lambda front: front.set_health(service, status))

    def enter_graceful_shutdown(self) -> None:
        """Sets every service NOT_SERVING, for good: later set() calls are
        ignored."""
        with self._lock:
            if self._gracefully_shutting_down:
                return
            # grpcio's set() for each service, not ours: the fronts' watchers
            # are told by the fronts' own shutdown, once (ours would tell
            # them a second time).
            for service in list(self._server_status):
                _reference.HealthServicer.set(self, service, _NOT_SERVING)
            self._gracefully_shutting_down = True
            self._publish(lambda front: front.enter_health_shutdown())

    def _native_state(self) -> Tuple[Dict[str, int], bool]:
        return dict(self._server_status), self._gracefully_shutting_down


from . import aio  # noqa: E402 - needs HealthServicer's module complete

__all__ = ["OVERALL_HEALTH", "SERVICE_NAME", "HealthServicer", "aio"]
