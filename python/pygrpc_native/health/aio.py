"""The asyncio health servicer: a drop-in for grpcio-health-checking's
``grpc_health.v1.health.aio.HealthServicer`` whose statuses also live in Go
(see pygrpc_native.health). ``set()`` and ``enter_graceful_shutdown()`` are
coroutines, as there; Watch streams get the latest status of their service
whenever it differs from the last one they got, as there."""

from __future__ import annotations

import threading
from typing import Any, Dict, Tuple

from grpc_health.v1 import health as _reference

from ._shared import NativeHealth, checked, mark_native


class HealthServicer(NativeHealth, _reference.aio.HealthServicer):
    _WATCH_CHANGES_ONLY = True

    _server_status: Dict[str, int]
    _gracefully_shutting_down: bool

    def __init__(self) -> None:
        _reference.aio.HealthServicer.__init__(self)
        self._init_native(threading.RLock())

    # Run in Python only where the server doesn't know this servicer; see
    # pygrpc_native.health.HealthServicer.
    @mark_native
    async def Check(self, request: Any, context: Any) -> Any:
        return await super().Check(request, context)

    @mark_native
    async def Watch(self, request: Any, context: Any) -> None:
        await super().Watch(request, context)

    async def set(self, service: str, status: int) -> None:
        """Sets the status of a service ("" for the whole server). Ignored
        after enter_graceful_shutdown()."""
        service, status = checked(service, status)
        if self._gracefully_shutting_down:
            return
        # Go first and without awaiting, so that the fronts see the set()
        # calls in the order they were made.
        with self._native_lock:
            self._publish(lambda front: front.set_health(service, status))
        await super().set(service, status)

    async def enter_graceful_shutdown(self) -> None:
        """Sets every service NOT_SERVING, for good: later set() calls are
        ignored."""
        if self._gracefully_shutting_down:
            return
        with self._native_lock:
            self._publish(lambda front: front.enter_health_shutdown())
        await super().enter_graceful_shutdown()

    def _native_state(self) -> Tuple[Dict[str, int], bool]:
        return dict(self._server_status), self._gracefully_shutting_down
