"""Starts the probes' server (serve.py) in a process of its own and talks
to it: calls, its Stats, its end. Every wait here has a time limit."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, TypeVar

import grpc

SERVE = Path(__file__).with_name("serve.py")
ROOT = Path(__file__).resolve().parents[2]
SAY, COUNT, BIDI, STATS = (f"/rel.R/{m}" for m in ("Say", "Count", "Bidi", "Stats"))
# bench/goserver: plain grpc-go, the reference for answers to bad frames.
GRPC_GO = "grpcgo"
GRPC_GO_SAY = "/echo.Echo/Say"

# The transport our servers run on (PGN_TRANSPORT, passed to every server
# of ours this harness starts; the package's default when unset). Results
# and failures are labelled with it.
TRANSPORT = os.environ.get("PGN_TRANSPORT") or "h2"
# Our default SETTINGS_MAX_CONCURRENT_STREAMS, given to plain grpc-go too so
# that both advertise the same limit (h2spec skips its cases without one).
MAX_CONCURRENT_STREAMS = 1024

# Ours, and the controls; "lowlevel" serves no Bidi and has no callbacks.
OURS = ("server", "aio", "lowlevel")
CONTROL = "grpc"
# The control each of ours is compared with.
CONTROL_OF = {"server": "grpc", "aio": "grpc_aio", "lowlevel": "grpc"}

T = TypeVar("T")


class ServerProcess:
    """serve.py KIND in a child process. Use as a context manager; the
    process is ended (SIGKILL as a last resort) when the block ends."""

    def __init__(self, kind: str, workers: int = 16, tls_dir: Optional[Path] = None,
                 max_rpcs: Optional[int] = None) -> None:
        self.kind = kind
        self.say_path = GRPC_GO_SAY if kind == GRPC_GO else SAY
        self.label = f"{kind} on {TRANSPORT}" if kind in OURS else kind
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("PGN_TRANSPORT", None)
        if kind in OURS:
            env["PGN_TRANSPORT"] = TRANSPORT
        if tls_dir is not None:
            env["PGN_REL_TLS_DIR"] = str(tls_dir)
        if max_rpcs is not None:
            env["PGN_REL_MAX_RPCS"] = str(max_rpcs)
        if kind == GRPC_GO:
            cmd = [str(grpc_go_binary()), "-max-concurrent-streams", str(MAX_CONCURRENT_STREAMS)]
        else:
            cmd = [sys.executable, str(SERVE), kind, str(workers)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("PORT "):
            self.proc.kill()
            raise RuntimeError(f"serve.py {kind} did not start (said {line!r})")
        self.port = int(line.split()[1])
        self.target = f"127.0.0.1:{self.port}"
        self._channel: Optional[grpc.Channel] = None

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def channel(self) -> grpc.Channel:
        """A new channel with a connection of its own."""
        return grpc.insecure_channel(self.target, options=[("grpc.use_local_subchannel_pool", 1)])

    @property
    def shared(self) -> grpc.Channel:
        if self._channel is None:
            self._channel = self.channel()
        return self._channel

    def stats(self) -> Dict[str, Any]:
        return json.loads(self.shared.unary_unary(STATS)(b"", timeout=30))

    def say(self, payload: bytes, timeout: float = 10) -> bytes:
        return self.shared.unary_unary(SAY)(payload, timeout=timeout)

    def live_call_seconds(self) -> float:
        """How long a fresh call on a new connection takes to be answered."""
        t0 = time.monotonic()
        with self.channel() as ch:
            assert ch.unary_unary(self.say_path)(b"live", timeout=30) == b"live"
        return time.monotonic() - t0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 30) -> Optional[int]:
        """SIGTERM (the server stops with grace 1 s); its exit code."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self.proc.poll() is None:
            try:
                self.proc.terminate()
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                return None
        return self.proc.returncode


def grpc_go_binary() -> Path:
    """bench/goserver, built into build/reliability/ once per test run (go
    build caches, and a binary from an older checkout may lack a flag)."""
    out = ROOT / "build" / "reliability" / "goserver"
    global _BUILT
    if not _BUILT:
        subprocess.run(["go", "build", "-o", str(out), "./bench/goserver"], cwd=ROOT, check=True, timeout=600)
        _BUILT = True
    return out


_BUILT = False


def settle(read: Callable[[], T], done: Callable[[T], bool], timeout: float = 30.0, every: float = 0.1) -> T:
    """Reads until done(value) or the timeout; returns the last value."""
    deadline = time.monotonic() + timeout
    value = read()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(every)
        value = read()
    return value


def settled_stats(server: ServerProcess, timeout: float = 30.0) -> Dict[str, Any]:
    """Stats once no call is active and every registered callback fired."""

    def quiet(s: Dict[str, Any]) -> bool:
        # The Stats call itself is active while it is answered.
        active_ok = s["metrics"] is None or s["metrics"]["calls_active"] <= 1
        return active_ok and s["callbacks_fired"] == s["callbacks_registered"]

    return settle(server.stats, quiet, timeout)


def record(section: str, server: ServerProcess, figures: Dict[str, Any]) -> None:
    """Keeps a test's figures for report.py, which runs the tests and
    tabulates what they measured: one JSON line per server per section,
    appended to the file PGN_REL_RECORD names (nothing when unset)."""
    path = os.environ.get("PGN_REL_RECORD")
    if path:
        line = {"section": section, "kind": server.kind, "transport": TRANSPORT, "figures": figures}
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")


def percentile(values: List[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


def growth_percent(before: float, after: float) -> float:
    return 100.0 * (after - before) / before if before else 0.0


def metrics_broken(m: Optional[Dict[str, Any]]) -> List[str]:
    """What is wrong with the front's counters (Front.Metrics, metrics())
    of a quiet server (every client but the Stats channel gone): each
    started call ended in exactly one way (calls_started == completed +
    cancelled + deadline_exceeded + active), only the Stats call is
    active, no event waits, and only the Stats channel's connection is
    open. Empty when all hold, and for grpcio (m is None: no metrics)."""
    if m is None:
        return []
    out = []
    ended = m["calls_completed"] + m["calls_cancelled"] + m["calls_deadline_exceeded"]
    if m["calls_started"] != ended + m["calls_active"]:
        out.append(f"calls_started {m['calls_started']} != completed + cancelled + deadline_exceeded "
                   f"{ended} + active {m['calls_active']}")
    if m["calls_active"] != 1:
        out.append(f"calls_active {m['calls_active']} (only the Stats call should be)")
    if m["events_queued"] != 0:
        out.append(f"events_queued {m['events_queued']}")
    if m["connections_active"] != 1:
        out.append(f"connections_active {m['connections_active']} (only the Stats channel's should be)")
    return out


def settled_metrics(server: ServerProcess, timeout: float = 30.0) -> Optional[Dict[str, Any]]:
    """The server's metrics once metrics_broken finds nothing wrong (a
    closed connection or a cancelled call is counted a moment later), or
    the last ones read when timeout passes."""
    return settle(server.stats, lambda s: not metrics_broken(s["metrics"]), timeout)["metrics"]
