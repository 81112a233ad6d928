"""What both health servicers share: the fronts that answer for them in Go."""

from __future__ import annotations

import operator
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

from .._core import NATIVE_HEALTH_HOOK

if TYPE_CHECKING:
    from .._front import NativeGrpcFront


def mark_native(method: Callable[..., Any]) -> Callable[..., Any]:
    """Marks a servicer method that a pygrpc_native server answers in Go:
    the server calls the hook the mark holds when it serves the method."""
    setattr(method, NATIVE_HEALTH_HOOK, _serve_natively)
    return method


def _serve_natively(behavior: Any, front: NativeGrpcFront) -> None:
    """The hook of marked methods: Go answers Check and Watch on ``front``
    from now on, if the servicer of ``behavior`` lets it (native_servicer)."""
    servicer = native_servicer(behavior)
    if servicer is not None:
        servicer._serve_on(front)


class NativeHealth:
    """The Go side of a health servicer.

    Invariant: every front in ``_fronts`` holds the statuses and shutdown
    state the servicer holds. A front is filled from the servicer's state
    when the server takes the servicer on (``_serve_on``), and each later
    change reaches every front under ``_native_lock``, in the order the
    changes were made (the sync servicer changes its own state under the
    same lock; the aio one right after, on its event loop).
    """

    # How Watch streams follow the table: False sends every set() (the sync
    # servicer), True the latest status when it changes (the aio one).
    _WATCH_CHANGES_ONLY = False

    _native_lock: "threading.RLock"

    def _init_native(self, lock: "threading.RLock") -> None:
        self._native_lock = lock
        self._fronts: "weakref.WeakSet[NativeGrpcFront]" = weakref.WeakSet()

    def _native_state(self) -> Tuple[Dict[str, int], bool]:
        """The servicer's statuses and whether it is shut down."""
        raise NotImplementedError

    def _publish(self, change: Callable[[NativeGrpcFront], None]) -> None:
        """Makes a change on every front; call with _native_lock held."""
        for front in list(self._fronts):
            try:
                change(front)
            except RuntimeError:
                self._fronts.discard(front)  # the front is closed: its server is gone

    def _serve_on(self, front: NativeGrpcFront) -> None:
        """Answers Check and Watch on front in Go from now on, with this
        servicer's statuses."""
        with self._native_lock:
            front.enable_health(changes_only=self._WATCH_CHANGES_ONLY)
            statuses, shut_down = self._native_state()
            for service, status in statuses.items():
                front.set_health(service, status)
            if shut_down:
                front.enter_health_shutdown()
            self._fronts.add(front)


def checked(service: Any, status: Any) -> Tuple[str, int]:
    """(service, status) of a set() call, or TypeError."""
    if not isinstance(service, str):
        raise TypeError(f"service must be a str, not {type(service).__name__}")
    try:
        return service, operator.index(status)
    except TypeError:
        raise TypeError(f"status must be a HealthCheckResponse.ServingStatus value, not {status!r}") from None


def native_servicer(behavior: Any) -> Optional[NativeHealth]:
    """The servicer whose Check or Watch ``behavior`` is, if it can be
    answered in Go: a subclass that overrides either method has Python code
    to run, so both stay in Python, with the state they share."""
    servicer = getattr(behavior, "__self__", None)
    if not isinstance(servicer, NativeHealth):
        return None
    cls = type(servicer)
    if all(getattr(getattr(cls, name), NATIVE_HEALTH_HOOK, None) is _serve_natively for name in ("Check", "Watch")):
        return servicer
    return None
