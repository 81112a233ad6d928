"""The add_callback() callbacks of pygrpc_native.server()'s calls.

As grpcio runs them on its serving thread, callbacks run once their call
ends, one call's after another's, on a thread of their own: never in the
handler's thread, and never in the server's pool, whose threads may all
be serving calls (a callback that gives back what the next call needs,
a pooled connection, would then wait behind that call).

Two threads, each started on first use:

* the *runner* runs the callbacks of the calls put on its queue, and
  ends after _RUNNER_IDLE with nothing to run (the next call started
  again);
* the *watcher* waits in Go for the ends of calls that end without their
  handler finishing them (client cancel, deadline, the server's stop):
  add_callback() has Go watch its call, and the watcher hands the calls
  Go reports to the runner.

A call its handler finished is handed to the runner by the handler's
thread. Whichever of the two comes first takes the call from ``_watched``,
so its callbacks run once.

The server's stop is over once the callbacks of its calls have run
(drain), as grpcio sets its stop's event after them: an application that
exits then loses none (the runner's thread is a daemon).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import TYPE_CHECKING, Dict, Optional, Union

from ._call_state import CallState
from ._grpc_logs import SERVER_LOG

if TYPE_CHECKING:
    from ._front import NativeGrpcFront


# Ends of watched calls taken from Go at once.
_ENDS_BATCH = 64
# How long the runner waits for more calls before its thread ends.
_RUNNER_IDLE = 1.0
# How long drain waits for the handlers' threads to hand over the calls
# they finished (they do just after the call's end), and how often it looks.
_HANDOVER_WAIT = 1.0
_HANDOVER_LOOK = 0.002


class CallbackRunner:
    """Runs each watched call's callbacks once, after the call ended."""

    def __init__(self, front: NativeGrpcFront) -> None:
        self._front = front
        self._watched: Dict[int, CallState] = {}  # call id -> call
        # Guards starting the two threads, and the runner's end: a call is
        # put on _due under it, and the runner ends only under it with
        # _due empty, so no call is left behind a runner that is leaving.
        self._lock = threading.Lock()
        self._watcher: Optional[threading.Thread] = None
        self._runner: Optional[threading.Thread] = None
        # Calls whose callbacks are due, in order; an Event is drain's
        # marker, set when the runner gets to it.
        self._due: queue.SimpleQueue[Union[CallState, threading.Event]] = queue.SimpleQueue()

    def watch(self, call: CallState) -> bool:
        """Makes the call's callbacks run when it ends; False if the call
        has already ended."""
        call_id = call.call_id
        self._watched[call_id] = call
        try:
            watching = self._front.watch(call_id)
        except RuntimeError:
            watching = False  # the server has stopped
        if not watching:
            self._watched.pop(call_id, None)
            return False
        if self._watcher is None:
            with self._lock:
                if self._watcher is None:
                    self._watcher = threading.Thread(
                        target=self._hand_over_ended_calls, name="pygrpc_native-watcher", daemon=True
                    )
                    self._watcher.start()
        return True

    def call_ended(self, call: CallState) -> None:
        """Has the callbacks of a call that ended in its handler's thread
        run (unless they ran already)."""
        if self._watched.pop(call.call_id, None) is not None:
            self._run_later(call)

    def running_here(self) -> bool:
        """Whether this thread is the one running callbacks."""
        return threading.current_thread() is self._runner

    def drain(self) -> None:
        """Returns once the callbacks of every watched call have run. For a
        front that has stopped: its calls have ended, and the watcher ends
        once it has handed over Go's ends of them; a call its handler
        finished is handed over by that thread just after (waited for up to
        _HANDOVER_WAIT)."""
        if self._watcher is None:
            return  # no call ever had a callback
        self._watcher.join()
        deadline = time.monotonic() + _HANDOVER_WAIT
        while self._watched and time.monotonic() < deadline:
            time.sleep(_HANDOVER_LOOK)
        marker = threading.Event()
        self._run_later(marker)
        marker.wait()

    def _run_later(self, call: Union[CallState, threading.Event]) -> None:
        with self._lock:
            self._due.put(call)
            if self._runner is None:
                self._runner = threading.Thread(target=self._run_due, name="pygrpc_native-callbacks", daemon=True)
                self._runner.start()

    def _run_due(self) -> None:
        due = self._due
        while True:
            try:
                call = due.get(timeout=_RUNNER_IDLE)
            except queue.Empty:
                with self._lock:
                    if due.empty():
                        self._runner = None
                        return
                continue
            if isinstance(call, threading.Event):
                call.set()  # drain's marker: everything before it has run
            else:
                run_callbacks(call)

    def _hand_over_ended_calls(self) -> None:
        while (events := self._front.recv_watched(_ENDS_BATCH)) is not None:
            for _kind, call_id, _method_id, _payload, _client in events:
                call = self._watched.pop(call_id, None)
                if call is not None:
                    self._run_later(call)


def run_callbacks(call: CallState) -> None:
    """Runs the call's callbacks and refuses later ones; a failing callback
    is logged, as grpcio does, and the others still run. So does one that
    raises SystemExit or KeyboardInterrupt: it runs on the server's thread,
    not the application's (grpcio's serving thread dies of it, and its
    server hangs), and the runner must live on for the calls after it."""
    callbacks, call.callbacks = call.callbacks, None
    for callback in callbacks or ():
        try:
            callback()
        except BaseException:  # noqa: BLE001 - see above
            SERVER_LOG.exception("Exception calling callback!")
