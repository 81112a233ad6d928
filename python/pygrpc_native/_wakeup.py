"""A wake-up one thread waits on, together with a file descriptor."""

from __future__ import annotations

import os
import select
import threading
from typing import Any, Dict


class Wakeup:
    """What threading.Event's set() and wait() give one waiting thread, with
    two differences: the wait can also end when another descriptor becomes
    readable (poll(2), the GIL released), and a wait that ends on set()
    clears it. It is a non-blocking pipe: set() writes a byte unless one is
    already there, the waiter reads it back.

    ``_set`` says a byte may be in the pipe; the waiter lowers it *before*
    draining, so a set() that lands in between writes a byte the drain takes
    (that wait reports it) or one the next wait finds: no set() is lost.
    ``_lock`` orders set() against close(), so that no write reaches a
    descriptor number that close() has given back to the process."""

    __slots__ = ("_r", "_w", "_set", "_lock", "_polls")

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._set = False
        self._lock = threading.Lock()
        self._polls: Dict[int, Any] = {}  # the other descriptor (-1: none) -> its poll object

    def set(self) -> None:
        """Ends the current or next wait. Any thread; a no-op once closed."""
        with self._lock:
            if self._set or self._w < 0:
                return
            self._set = True
            try:
                os.write(self._w, b"\0")
            except BlockingIOError:
                pass  # a byte is there already

    def wait(self, timeout: float, fd: int = -1) -> bool:
        """Waits until set() (True), fd (if not -1) is readable, or timeout
        seconds pass (False in both cases). One thread only."""
        poll = self._polls.get(fd)
        if poll is None:
            poll = self._polls[fd] = select.poll()
            poll.register(self._r, select.POLLIN)
            if fd >= 0:
                poll.register(fd, select.POLLIN)
        ready = poll.poll(timeout * 1000)
        if not any(d == self._r for d, _ in ready):
            return False
        self._set = False
        try:
            while os.read(self._r, 64):
                pass
        except BlockingIOError:
            pass
        return True

    def close(self) -> None:
        """Gives the pipe back; set() does nothing from now on, and wait()
        must not be called again."""
        with self._lock:
            r, w = self._r, self._w
            self._r = self._w = -1
        if w >= 0:
            os.close(r)
            os.close(w)
