"""What answering health checks in Go buys: probes succeed while a handler
holds the GIL or every worker is busy, where grpcio's server (with
grpcio-health-checking) lets them time out. Also: a grpc_health_probe-style
client (grpc-go's health stubs, tests/healthprobe) against server(),
aio.server() and the low-level NativeGrpcFront.

The first run builds tests/healthprobe with `go build` into build/ (seconds;
the Go modules are those the package itself was built with); HEALTH_PROBE=path
uses another build.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import time

import grpc
import pytest

import pygrpc_native
from diff import health as h
from diff.aio_harness import running as aio_running
from diff.harness import WAIT, running, setup_handlers, unary, wait_until

pytestmark = pytest.mark.timeout(180)

SC = grpc.StatusCode
ROOT = pathlib.Path(__file__).resolve().parent.parent
HERE = pathlib.Path(__file__).resolve().parent

# The probe's deadline: far below the time a handler holds the GIL or the
# workers, far above what answering takes.
PROBE_DEADLINE = 0.1


@pytest.fixture(scope="module")
def probe():
    """Runs the health probe binary: probe(port, *args) -> (exit code, output lines)."""
    binary = os.environ.get("HEALTH_PROBE")
    if not binary:
        go = shutil.which("go")
        if go is None:
            pytest.skip("Go is needed to build tests/healthprobe (or set HEALTH_PROBE)")
        binary = str(ROOT / "build" / "healthprobe")
        subprocess.run([go, "build", "-o", binary, "./tests/healthprobe"], cwd=ROOT, check=True, timeout=600)

    def command(port, *args, timeout="1s"):
        return [binary, "-addr", f"127.0.0.1:{port}", "-timeout", timeout, *args]

    def run(port, *args, timeout="1s"):
        proc = subprocess.run(command(port, *args, timeout=timeout), capture_output=True, text=True, timeout=30)
        return proc.returncode, proc.stdout.splitlines()

    run.command = command
    return run


# -- grpc_health_probe-style checks ------------------------------------------------


def _probe_scenario(probe, port, setter):
    seen = [
        probe(port),
        probe(port, "-service", "a"),
        probe(port, "-service", "b"),
        probe(port, "-service", "missing"),
    ]
    command = probe.command(port, "-service", "a", "-watch", "2", timeout="10s")
    watch = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        first = watch.stdout.readline()  # the current status: the watch is in place
        setter.set("a", h.NOT_SERVING)
        rest, _ = watch.communicate(timeout=WAIT * 2)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    seen.append((watch.returncode, (first + rest).splitlines()))
    return seen


_EXPECTED_PROBES = [
    (0, ["status: SERVING"]),
    (0, ["status: SERVING"]),
    (1, ["status: NOT_SERVING"]),
    (2, ["error: NotFound: "]),
    (1, ["status: SERVING", "status: NOT_SERVING"]),
]


@pytest.mark.parametrize("kind", ["grpcio", "native"])
def test_probe_against_server(kind, probe):
    with running(kind, h.health_setup(h.BEFORE_START)) as run:
        assert _probe_scenario(probe, run.port, h.Setter(run.state.wait_for("servicer"))) == _EXPECTED_PROBES


@pytest.mark.parametrize("kind", ["grpcio", "native"])
def test_probe_against_aio_server(kind, probe):
    with aio_running(kind, h.health_setup(h.BEFORE_START)) as run:
        assert _probe_scenario(probe, run.port, h.Setter(run.state.wait_for("servicer"), run.on_loop)) == _EXPECTED_PROBES


def test_probe_against_the_low_level_front(probe):
    """NativeGrpcFront(health=True) answers with nobody taking its events."""
    front = pygrpc_native.NativeGrpcFront("127.0.0.1:0", [], health=True)
    try:
        front.start()
        front.set_health("a", h.SERVING)
        front.set_health("b", h.NOT_SERVING)
        seen = [probe(front.port, "-service", s) for s in ("", "a", "b", "missing")]
        front.enter_health_shutdown()
        front.set_health("a", h.SERVING)
        seen.append(probe(front.port, "-service", "a"))
        assert front.recv_batch(16, 0) == []
    finally:
        front.stop(0)
    assert seen == _EXPECTED_PROBES[:4] + [(1, ["status: NOT_SERVING"])]


def test_low_level_health_needs_enabling():
    front = pygrpc_native.NativeGrpcFront("127.0.0.1:0", [])
    with pytest.raises(RuntimeError, match="enable_health"):
        front.set_health("", h.SERVING)
    with pytest.raises(RuntimeError, match="enable_health"):
        front.enter_health_shutdown()
    front.enable_health()
    with pytest.raises(TypeError):
        front.set_health(b"", h.SERVING)
    with pytest.raises(TypeError):
        front.set_health("", "SERVING")
    front.set_health("", h.NOT_SERVING)


def test_low_level_health_answers_the_methods_enabled():
    """enable_health(check=..., watch=...) answers those methods in Go and
    adds to what is answered; a method not enabled is routed as any path
    (here: unknown, so UNIMPLEMENTED in Go)."""
    front = pygrpc_native.NativeGrpcFront("127.0.0.1:0", [])
    front.start()
    try:
        front.enable_health(check=True, watch=False)
        with grpc.insecure_channel(f"127.0.0.1:{front.port}") as channel:
            check = h.check(channel, "")
            watch = h.Watch(channel, "", timeout=2)
            first = watch.next()
            front.enable_health(watch=True, check=False)
            again = h.Watch(channel, "", timeout=2)
            second = again.next()
            again.close()
    finally:
        front.stop(0)
    assert (check, first, second) == ((SC.OK, "", h.SERVING), (SC.UNIMPLEMENTED, "Method not found!"), h.SERVING)


# -- a handler holds the GIL -------------------------------------------------------


class _GilServer:
    """tests/health_gil_server.py in a process of its own."""

    def __init__(self, kind):
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "health_gil_server.py"), kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.port = int(self._line("port "))

    def _line(self, prefix):
        line = self.proc.stdout.readline().strip()
        assert line.startswith(prefix), f"server said {line!r}, expected {prefix!r}..."
        return line[len(prefix) :]

    def hold(self, channel):
        """Starts a call whose handler holds the GIL; returns once it holds
        it, with the call's future."""
        future = channel.unary_unary("/hold.Hold/Hold").future(b"", timeout=60)
        self._line("holding")
        # The handler printed that just before its match: give it time to
        # take the GIL back from the write (seconds of holding remain).
        time.sleep(0.2)
        return future

    def held_seconds(self):
        return float(self._line("held "))

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _probe_while_the_gil_is_held(kind, probe):
    server = _GilServer(kind)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=WAIT)
            assert h.check(channel) == (SC.OK, "", h.SERVING)  # connected, and answered when idle
            held = server.hold(channel)
            check = h.check(channel, timeout=PROBE_DEADLINE)
            go_probe = probe(server.port, timeout="500ms")
            assert held.result(timeout=60) == b"held"
            assert server.held_seconds() > 1.0, "the handler held the GIL too briefly to show anything"
            return check[0], go_probe[0]
    finally:
        server.close()


@pytest.mark.parametrize("flavor", ["", "-aio"])
def test_probes_answered_while_a_handler_holds_the_gil(flavor, probe):
    assert _probe_while_the_gil_is_held("grpcio" + flavor, probe) == (SC.DEADLINE_EXCEEDED, 2)
    assert _probe_while_the_gil_is_held("native" + flavor, probe) == (SC.OK, 0)


# -- every worker is busy ----------------------------------------------------------


def _busy_setup(server, state):
    release = state.event("release")

    def busy(request, context):
        state.append("busy", 1)
        release.wait(WAIT * 2)
        return b"done"

    setup_handlers({"Busy": unary(busy)})(server, state)
    h.health_setup()(server, state)


def _probe_while_every_worker_is_busy(kind, workers=2):
    with running(kind, _busy_setup, workers=workers) as run:
        calls = [run.channel.unary_unary("/diff.Diff/Busy").future(b"", timeout=WAIT * 3) for _ in range(workers)]
        try:
            assert wait_until(lambda: len(run.state.records.get("busy", ())) == workers)
            return h.check(run.channel, timeout=PROBE_DEADLINE)[0]
        finally:
            run.state.event("release").set()
            for call in calls:
                call.result()


def test_probes_answered_while_every_worker_is_busy():
    assert _probe_while_every_worker_is_busy("grpcio") == SC.DEADLINE_EXCEEDED
    assert _probe_while_every_worker_is_busy("native") == SC.OK


def _blocked_loop_setup(server, state):
    release = state.event("release")

    async def block_the_loop(request, context):
        state.append("busy", 1)
        release.wait(WAIT * 2)  # blocks the event loop, on purpose
        return b"done"

    setup_handlers({"Busy": unary(block_the_loop)})(server, state)
    h.health_setup()(server, state)


def _probe_while_the_loop_is_blocked(kind):
    with aio_running(kind, _blocked_loop_setup) as run:
        call = run.channel.unary_unary("/diff.Diff/Busy").future(b"", timeout=WAIT * 3)
        try:
            assert wait_until(lambda: run.state.records.get("busy"))
            return h.check(run.channel, timeout=PROBE_DEADLINE)[0]
        finally:
            run.state.event("release").set()
            call.result()


def test_aio_probes_answered_while_the_event_loop_is_blocked():
    assert _probe_while_the_loop_is_blocked("grpcio") == SC.DEADLINE_EXCEEDED
    assert _probe_while_the_loop_is_blocked("native") == SC.OK
