"""Helpers for the tests of the low-level API, NativeGrpcFront.

Two ways to drive a front:

* ``serving(handler, ...)`` starts a front and one or more serving threads
  that pull events with ``recv_batch`` and pass each one to
  ``handler(front, event)``. Every event is also recorded in an ``EventLog``
  that tests can wait on. Exceptions raised by the handler fail the test.
* ``started_front(...)`` starts a front without serving threads; the test
  pulls events itself with ``next_event``/``next_events``.

Both stop the front when the block ends, with a time limit, so that a bug in
stop() fails the test instead of hanging the suite.

Every blocking call here has a time limit: nothing may hang forever.
"""

import contextlib
import threading
import time

import grpc

from pygrpc_native import EVENT_CALL, EVENT_CANCEL, NativeGrpcFront

SAY = "/echo.Echo/Say"
COUNT = "/echo.Echo/Count"
METHODS = ((SAY, False), (COUNT, True))
SAY_ID = 0
COUNT_ID = 1

# How long a test waits for something that should happen at once.
WAIT = 10.0


class EventLog:
    """Thread-safe record of every event the serving threads received."""

    def __init__(self):
        self._cond = threading.Condition()
        self.events = []

    def add(self, events):
        with self._cond:
            self.events.extend(events)
            self._cond.notify_all()

    def snapshot(self):
        with self._cond:
            return list(self.events)

    def calls(self):
        return [e for e in self.snapshot() if e[0] == EVENT_CALL]

    def cancels(self):
        return [e for e in self.snapshot() if e[0] == EVENT_CANCEL]

    def wait_for(self, predicate, timeout=WAIT, what="an event"):
        """Returns the first recorded event matching predicate, waiting up
        to timeout seconds for it; fails the test if none arrives."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for e in self.events:
                    if predicate(e):
                        return e
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"timed out after {timeout}s waiting for {what}; events so far: {self.events!r}"
                    )
                self._cond.wait(left)

    def wait_call(self, payload=None, timeout=WAIT):
        return self.wait_for(
            lambda e: e[0] == EVENT_CALL and (payload is None or e[3] == payload),
            timeout,
            f"EVENT_CALL with payload {payload!r}",
        )

    def wait_cancel(self, call_id, timeout=WAIT):
        return self.wait_for(
            lambda e: e[0] == EVENT_CANCEL and e[1] == call_id,
            timeout,
            f"EVENT_CANCEL for call {call_id}",
        )

    def wait_count(self, kind, n, timeout=WAIT):
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                got = [e for e in self.events if e[0] == kind]
                if len(got) >= n:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {n} events of kind {kind}; got {len(got)}")
                self._cond.wait(left)


def run_with_timeout(fn, timeout, what):
    """Runs fn() in a daemon thread and returns its result; fails the test
    if it takes longer than timeout seconds (the thread is left behind)."""
    result = {}

    def target():
        try:
            result["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            result["error"] = exc

    t = threading.Thread(target=target, name=f"timed:{what}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise AssertionError(f"{what} did not return within {timeout}s")
    if "error" in result:
        raise result["error"]
    return result.get("value")


def stop_front(front, grace=None, timeout=30.0):
    """front.stop(grace) with a time limit; returns the seconds it took."""
    t0 = time.monotonic()
    run_with_timeout(lambda: front.stop(grace), timeout, f"front.stop(grace={grace})")
    return time.monotonic() - t0


def echo(front, event):
    """Handler: answers every call with its own request."""
    kind, call_id, _method_id, payload, _key = event
    if kind == EVENT_CALL:
        front.respond(call_id, payload)


def ignore(front, event):
    """Handler: never answers."""


class Served:
    """A started front with serving threads; see serving()."""

    def __init__(self, front, handler, threads, batch):
        self.front = front
        self.handler = handler
        self.log = EventLog()
        self.errors = []
        self._batch = batch
        self._stop_requested = None
        self._threads = [
            threading.Thread(target=self._serve, name=f"serve-{i}", daemon=True) for i in range(threads)
        ]
        self.finished = threading.Event()  # set when every serving thread has seen None

    @property
    def target(self):
        return f"127.0.0.1:{self.port}"

    def channel(self, target=None, options=None):
        """A grpcio channel to the front with its own connection (grpcio
        otherwise shares one connection among channels to one target)."""
        return grpc.insecure_channel(
            target or self.target, options=[("grpc.use_local_subchannel_pool", 1), *(options or ())]
        )

    def start_threads(self):
        # Read once: tests must not depend on reading front.port while the
        # front stops (test_lowlevel_lifecycle checks that separately).
        self.port = self.front.port
        for t in self._threads:
            t.start()

    def _serve(self):
        while True:
            try:
                events = self.front.recv_batch(self._batch, 0.25)
            except Exception as exc:  # noqa: BLE001
                self.errors.append(f"recv_batch raised {exc!r}")
                return
            if events is None:
                return
            if not events:
                if self._stop_requested is not None and time.monotonic() - self._stop_requested > 5:
                    self.errors.append("recv_batch never returned None after stop() returned")
                    return
                continue
            self.log.add(events)
            for event in events:
                try:
                    self.handler(self.front, event)
                except Exception as exc:  # noqa: BLE001
                    self.errors.append(f"handler raised {exc!r} for event {event!r}")

    def stop(self, grace=None, timeout=30.0):
        """Stops the front (time-limited) and returns the seconds stop() took.
        Only the first call stops the front; later ones return 0."""
        if self._stop_requested is not None:
            return 0.0
        took = stop_front(self.front, grace, timeout)
        self._stop_requested = time.monotonic()
        return took

    def join(self, timeout=WAIT):
        """Waits for the serving threads to see recv_batch return None."""
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        assert not alive, f"serving threads still running {timeout}s after stop: {alive}"

    def check(self):
        assert not self.errors, "serving thread errors:\n" + "\n".join(self.errors)


@contextlib.contextmanager
def serving(handler=echo, methods=METHODS, *, address="127.0.0.1:0", threads=1, batch=64, grace=None, **kwargs):
    """Starts a NativeGrpcFront serving with `threads` threads that pass
    each event to handler(front, event); stops it when the block ends."""
    front = NativeGrpcFront(address, methods, **kwargs)
    front.start()
    served = Served(front, handler, threads, batch)
    served.start_threads()
    ok = False
    try:
        yield served
        ok = True
    finally:
        try:
            served.stop(grace)
            served.join()
        except Exception:
            if ok:
                raise
    served.check()


@contextlib.contextmanager
def started_front(methods=METHODS, *, address="127.0.0.1:0", **kwargs):
    """Starts a NativeGrpcFront without serving threads; the test pulls
    events itself. Stops it when the block ends."""
    front = NativeGrpcFront(address, methods, **kwargs)
    front.start()
    ok = False
    try:
        yield front
        ok = True
    finally:
        try:
            stop_front(front)
        except Exception:
            if ok:
                raise


def next_events(front, n, timeout=WAIT, kind=None):
    """Pulls events until n of them (of `kind`, if given; others are
    returned too, after them) have arrived."""
    deadline = time.monotonic() + timeout
    got, other = [], []
    while len(got) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out waiting for {n} events (kind={kind}); got {got + other!r}")
        batch = front.recv_batch(n - len(got), min(left, 1.0))
        assert batch is not None, "recv_batch returned None on a running front"
        for e in batch:
            (got if kind is None or e[0] == kind else other).append(e)
    return got


def next_event(front, timeout=WAIT, kind=None):
    return next_events(front, 1, timeout, kind)[0]


def wait_until(predicate, timeout=WAIT, what="condition", interval=0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def say(channel):
    return channel.unary_unary(SAY)


def count(channel):
    return channel.unary_stream(COUNT)


def metadata_values(metadata, key):
    """All values of key in a grpcio metadata sequence, in order."""
    return [v for k, v in (metadata or ()) if k == key]
