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

# Ours, and the controls; "lowlevel" serves no Bidi and has no callbacks.
OURS = ("server", "aio", "lowlevel")
CONTROL = "grpc"
# The control each of ours is compared with.
CONTROL_OF = {"server": "grpc", "aio": "grpc_aio", "lowlevel": "grpc"}

T = TypeVar("T")


class ServerProcess:
    """serve.py KIND in a child process. Use as a context manager; the
    process is ended (SIGKILL as a last resort) when the block ends."""

    def __init__(self, kind: str, workers: int = 16, tls_dir: Optional[Path] = None) -> None:
        self.kind = kind
        self.say_path = GRPC_GO_SAY if kind == GRPC_GO else SAY
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if tls_dir is not None:
            env["PGN_REL_TLS_DIR"] = str(tls_dir)
        cmd = [str(grpc_go_binary())] if kind == GRPC_GO else [sys.executable, str(SERVE), kind, str(workers)]
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
    """bench/goserver, built once into build/reliability/ (go build caches)."""
    out = ROOT / "build" / "reliability" / "goserver"
    if not out.exists():
        subprocess.run(["go", "build", "-o", str(out), "./bench/goserver"], cwd=ROOT, check=True, timeout=600)
    return out


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


def percentile(values: List[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


def growth_percent(before: float, after: float) -> float:
    return 100.0 * (after - before) / before if before else 0.0
