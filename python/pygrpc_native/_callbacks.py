"""The add_callback() callbacks of pygrpc_native.server()'s calls.

As in grpcio, callbacks run once their call ends, never in the handler's
thread: a call its handler finished has them run in the server's pool; a
call that ends without its handler finishing it (client cancel, deadline)
is *watched*: Go reports its end on a queue of its own, which a thread
started on first use drains, so those callbacks run at once even while
every pool thread is busy.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable, Dict, Optional

from ._call_state import CallState
from ._grpc_logs import SERVER_LOG

if TYPE_CHECKING:
    from ._front import NativeGrpcFront


# Ends of watched calls taken from Go at once.
_ENDS_BATCH = 64


class CallbackRunner:
    """Runs each call's callbacks once. ``submit(fn, *args)`` runs fn in the
    server's pool (False if the pool refused it)."""

    def __init__(self, front: NativeGrpcFront, submit: Callable[..., bool]) -> None:
        self._front = front
        self._submit = submit
        self._watched: Dict[int, CallState] = {}  # call id -> call
        self._thread_lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def watch(self, call: CallState) -> bool:
        """Makes the call's callbacks run if it ends without its handler
        finishing it; False if the call has already ended."""
        call_id = call.call_id
        self._watched[call_id] = call
        try:
            watching = self._front.watch(call_id)
        except RuntimeError:
            watching = False  # the server has stopped
        if not watching:
            self._watched.pop(call_id, None)
            return False
        if self._thread is None:
            with self._thread_lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run_ended_calls, name="pygrpc_native-callbacks", daemon=True
                    )
                    self._thread.start()
        return True

    def call_ended(self, call: CallState) -> None:
        """Runs, in the pool, the callbacks of a call that ended in its
        handler's thread (unless they ran already)."""
        if self._watched.pop(call.call_id, None) is not None:
            self._submit(run_callbacks, call)

    def _run_ended_calls(self) -> None:
        while (events := self._front.recv_watched(_ENDS_BATCH)) is not None:
            for _kind, call_id, _method_id, _payload, _client in events:
                call = self._watched.pop(call_id, None)
                if call is not None:
                    run_callbacks(call)


def run_callbacks(call: CallState) -> None:
    """Runs the call's callbacks and refuses later ones; a failing callback
    is logged, as grpcio does, and the others still run."""
    callbacks, call.callbacks = call.callbacks, None
    for callback in callbacks or ():
        try:
            callback()
        except Exception:  # noqa: BLE001 - as grpcio
            SERVER_LOG.exception("Exception calling callback!")
