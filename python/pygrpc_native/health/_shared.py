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


# The paths Go answers, each for the servicer method of its last part.
_HEALTH_PATH = "/grpc.health.v1.Health/"


def _serve_natively(behavior: Any, front: NativeGrpcFront, path: str) -> None:
    """The hook of marked methods: Go answers ``behavior`` (Check or Watch)
    on ``front`` from now on, if it is served at its own path of
    grpc.health.v1.Health (a servicer registered under another name, or
    one method of it alone, is served as any other, as on grpcio) and its
    servicer lets Go answer (native_servicer)."""
    name = getattr(behavior, "__name__", None)
    if name not in ("Check", "Watch") or path != _HEALTH_PATH + name:
        return
    servicer = native_servicer(behavior)
    if servicer is not None:
        servicer._serve_on(front, name)


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

    def _serve_on(self, front: NativeGrpcFront, method: str) -> None:
        """Answers method ("Check" or "Watch") on front in Go from now on,
        with this servicer's statuses (copied to the front the first time)."""
        with self._native_lock:
            front.enable_health(
                changes_only=self._WATCH_CHANGES_ONLY, check=method == "Check", watch=method == "Watch"
            )
            if front in self._fronts:
                return
            statuses, shut_down = self._native_state()
            for service, status in statuses.items():
                try:
                    front.set_health(service, status)
                except (TypeError, ValueError, OverflowError):
                    # Only set() fills the table, and it refuses what Go
                    # can't hold; an entry put there another way is left
                    # out rather than leave the front without the others.
                    continue
            if shut_down:
                front.enter_health_shutdown()
            self._fronts.add(front)


def checked(service: Any, status: Any) -> Tuple[str, int]:
    """(service, status) of a set() call: TypeError for a service that
    isn't a str or a status that isn't an int (a bool included), ValueError
    for one the wire can't carry (a name that isn't UTF-8, a status outside
    int32), checked before anything changes. (grpcio-health-checking stores
    them, and each later Check or Watch of the service fails.)"""
    if not isinstance(service, str):
        raise TypeError(f"service must be a str, not {type(service).__name__}")
    if isinstance(status, bool):
        raise TypeError(f"status must be a HealthCheckResponse.ServingStatus value, not {status!r}")
    try:
        value = operator.index(status)
    except TypeError:
        raise TypeError(f"status must be a HealthCheckResponse.ServingStatus value, not {status!r}") from None
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"status {value} is outside the enum's int32 range")
    try:
        service.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"service {service!r} can't be sent: {err.reason}") from None
    return service, value


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
