"""Benchmark machinery shared by the bench.* drivers.

A benchmark is a table of server kinds x client kinds x workloads. Each cell is
measured ``runs`` times; a measurement starts a fresh server process, runs one
client process against it, and stops the server. The client prints
MEASURE_START / MEASURE_END around its measured window (warmup excluded), and
the driver reads the server's CPU time (utime + stime from /proc/<pid>/stat)
when it sees each line, so CPU per call covers the same window as the calls.

Runs are interleaved (run 1 of every cell, then run 2, ...) and the server
order is rotated each run, so drift in a noisy machine spreads over all
servers instead of landing on one.

To add a server, client or workload, add a ServerKind / ClientKind / Workload
and pass it to run_matrix(); servers and clients only need to follow the
process protocols in bench/servers/__init__.py and bench/clients/__init__.py.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO_ROOT / "bench"
RESULTS_DIR = BENCH_DIR / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
LOOPBACK = "127.0.0.1"

SERVER_START_TIMEOUT_S = 30.0
SERVER_STOP_TIMEOUT_S = 10.0
CLIENT_SLACK_S = 40.0  # beyond warmup + duration: connect, drain, interpreter start


# --------------------------------------------------------------------------- kinds


@dataclasses.dataclass(frozen=True)
class Workload:
    key: str
    name: str
    method: str = "/echo.Echo/Say"
    payload: int = 0  # request bytes; the echo server sends them back


@dataclasses.dataclass(frozen=True)
class ServerKind:
    key: str
    name: str
    argv: Sequence[str]  # the whole command, e.g. (sys.executable, "-m", "bench.servers.grpcio_sync")
    requires: Optional[str] = None  # a module that must be importable, else the server is skipped

    def available(self) -> Optional[str]:
        """None if the server can run here, else why not."""
        if self.requires is None:
            return None
        probe = subprocess.run(
            [sys.executable, "-c", f"import {self.requires}"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["import failed"])[-1]
            return f"cannot import {self.requires}: {last}"
        return None


@dataclasses.dataclass(frozen=True)
class ClientKind:
    key: str
    name: str
    # (addr, workload, duration_s, warmup_s) -> full argv; must pass the client's sync flag.
    command: Callable[[str, Workload, float, float], list]
    saturating: bool = False


# --------------------------------------------------------------------------- processes


class Proc:
    """A child process whose stdout lines are read by a thread into a queue."""

    def __init__(self, argv: Sequence[str], label: str, logdir: Path):
        self.label = label
        self.stderr_path = logdir / f"{label}.stderr"
        self._stderr = open(self.stderr_path, "w+b")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.popen = subprocess.Popen(
            list(argv),
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            text=True,
        )
        self.pid = self.popen.pid
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.popen.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def readline(self, deadline: float) -> Optional[str]:
        """Next stdout line; None at EOF. Raises TimeoutError after `deadline` (monotonic)."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{self.label}: no output in time")
        try:
            return self._lines.get(timeout=left)
        except queue.Empty:
            raise TimeoutError(f"{self.label}: no output in time") from None

    def stderr_tail(self, n: int = 2000) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        data = self._stderr.read().decode(errors="replace")
        return data[-n:]

    def stop(self, timeout: float = SERVER_STOP_TIMEOUT_S) -> tuple[Optional[int], bool]:
        """SIGTERM, wait; SIGKILL if it doesn't exit. Returns (returncode, exited_cleanly)."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
                return self.popen.returncode, False
        return self.popen.returncode, self.popen.returncode == 0

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            try:
                self.popen.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def close(self) -> None:
        self.kill()
        self._stderr.close()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_ticks() -> tuple[int, int]:
    """(busy, total) jiffies over all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    vals = [int(x) for x in parts[:8]]
    idle = vals[3] + vals[4]  # idle + iowait
    return sum(vals) - idle, sum(vals)


# --------------------------------------------------------------------------- one measurement


def measure_once(
    server: ServerKind,
    client: ClientKind,
    workload: Workload,
    duration: float,
    warmup: float,
    logdir: Path,
    tag: str,
) -> dict:
    rec: dict = {
        "server": server.key,
        "client": client.key,
        "workload": workload.key,
        "ok": False,
    }
    srv = Proc(server.argv, f"{tag}-server", logdir)
    cli = None
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        port = None
        while port is None:
            line = srv.readline(deadline)
            if line is None:
                raise RuntimeError(f"server exited before announcing its port:\n{srv.stderr_tail()}")
            if line.startswith("PORT "):
                port = int(line.split()[1])
        addr = f"{LOOPBACK}:{port}"

        cli = Proc(client.command(addr, workload, duration, warmup), f"{tag}-client", logdir)
        deadline = time.monotonic() + warmup + duration + CLIENT_SLACK_S
        t0 = t1 = None
        result = None
        while result is None:
            line = cli.readline(deadline)
            if line is None:
                raise RuntimeError(f"client exited without a result:\n{cli.stderr_tail()}")
            if line == "MEASURE_START":
                t0 = (time.monotonic(), cpu_seconds(srv.pid), cpu_seconds(cli.pid), machine_busy_ticks())
            elif line == "MEASURE_END":
                t1 = (time.monotonic(), cpu_seconds(srv.pid), cpu_seconds(cli.pid), machine_busy_ticks())
            elif line.startswith("{"):
                result = json.loads(line)
        if t0 is None or t1 is None:
            raise RuntimeError("client printed no MEASURE_START/MEASURE_END")
        cli.popen.wait(10)

        calls = result["calls"]
        window = t1[0] - t0[0]
        server_cpu = t1[1] - t0[1]
        client_cpu = t1[2] - t0[2]
        busy = (t1[3][0] - t0[3][0]) / max(1, t1[3][1] - t0[3][1])
        busy_cores = (t1[3][0] - t0[3][0]) / CLK_TCK / window if window > 0 else 0.0
        rec.update(
            calls=calls,
            calls_per_s=result["calls_per_s"],
            errors=result["errors"] + result.get("bad_responses", 0),
            errors_by_code=result.get("errors_by_code", {}),
            bad_responses=result.get("bad_responses", 0),
            p50_us=result["p50_us"],
            p99_us=result["p99_us"],
            client_duration_s=result["duration_s"],
            window_s=window,
            server_cpu_s=server_cpu,
            client_cpu_s=client_cpu,
            server_cpu_us_per_call=(server_cpu / calls * 1e6) if calls else None,
            client_cpu_us_per_call=(client_cpu / calls * 1e6) if calls else None,
            server_cores_used=server_cpu / window if window > 0 else None,
            machine_busy=busy,
            # CPU used by everything else on the machine during the window: noise.
            other_cores=max(0.0, busy_cores - (server_cpu + client_cpu) / window) if window > 0 else None,
        )
        rc, clean = srv.stop()
        rec["server_exit"] = rc
        rec["server_exited_cleanly"] = clean
        if not clean:
            rec["server_stderr"] = srv.stderr_tail()
        rec["ok"] = calls > 0
    except Exception as e:  # one failed measurement must not sink the whole table
        rec["failure"] = f"{type(e).__name__}: {e}"
        rec["server_stderr"] = srv.stderr_tail()
        if cli is not None:
            rec["client_stderr"] = cli.stderr_tail()
    finally:
        if cli is not None:
            cli.close()
        srv.close()
    return rec


# --------------------------------------------------------------------------- the matrix


def run_matrix(
    servers: Sequence[ServerKind],
    clients: Sequence[ClientKind],
    workloads: Sequence[Workload],
    runs: int,
    duration: float,
    warmup: float,
    log: Callable[[str], None] = print,
) -> list[dict]:
    records = []
    with tempfile.TemporaryDirectory(prefix="pgn-bench-logs-") as tmp:
        logdir = Path(tmp)
        for run in range(runs):
            for workload in workloads:
                for client in clients:
                    k = run % len(servers)
                    for server in list(servers[k:]) + list(servers[:k]):
                        tag = f"r{run}-{workload.key}-{client.key}-{server.key}"
                        rec = measure_once(server, client, workload, duration, warmup, logdir, tag)
                        rec["run"] = run
                        records.append(rec)
                        if rec["ok"]:
                            extra = f", {rec['errors']} errors" if rec["errors"] else ""
                            log(
                                f"  run {run + 1}/{runs} {workload.key} | {client.name} | {server.name}:"
                                f" {rec['calls_per_s']:,.0f} calls/s,"
                                f" server {rec['server_cpu_us_per_call']:.1f} us CPU/call"
                                f" ({rec['server_cores_used']:.2f} cores),"
                                f" client {rec['client_cpu_us_per_call']:.1f} us/call"
                                f" ({rec['client_cpu_s'] / rec['window_s']:.2f} cores),"
                                f" others {rec['other_cores']:.2f} cores"
                                + extra
                            )
                        else:
                            log(f"  run {run + 1}/{runs} {tag}: FAILED {rec.get('failure', 'no calls')}")
    return records


def _med_range(vals: list) -> Optional[dict]:
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def summarize(records: list[dict], baseline: str) -> list[dict]:
    """One row per (workload, client, server): medians, ranges and ratios to `baseline`.

    calls/s ratio: median of this server / median of the baseline, plus the
    range of per-run ratios (run i vs run i of the baseline, same client).
    CPU ratio: baseline CPU per call / this server's, so > 1 means cheaper.
    """
    cells: dict = {}
    for r in records:
        cells.setdefault((r["workload"], r["client"], r["server"]), []).append(r)
    rows = []
    for (w, c, s), rs in cells.items():
        good = [r for r in rs if r["ok"]]
        row = {
            "workload": w,
            "client": c,
            "server": s,
            "runs": len(rs),
            "failed_runs": len(rs) - len(good),
            "calls_per_s": _med_range([r["calls_per_s"] for r in good]),
            "server_cpu_us_per_call": _med_range([r["server_cpu_us_per_call"] for r in good]),
            "client_cpu_us_per_call": _med_range([r["client_cpu_us_per_call"] for r in good]),
            "server_cores_used": _med_range([r["server_cores_used"] for r in good]),
            "other_cores": _med_range([r["other_cores"] for r in good]),
            "p50_us": _med_range([r["p50_us"] for r in good]),
            "p99_us": _med_range([r["p99_us"] for r in good]),
            "errors": sum(r.get("errors", 0) for r in rs),
            "unclean_exits": sum(1 for r in good if not r.get("server_exited_cleanly")),
        }
        rows.append(row)
    by_key = {(r["workload"], r["client"], r["server"]): r for r in rows}
    base_runs = {}
    for r in records:
        if r["server"] == baseline and r["ok"]:
            base_runs[(r["workload"], r["client"], r["run"])] = r
    for row in rows:
        base = by_key.get((row["workload"], row["client"], baseline))
        row["ratio_calls_per_s"] = None
        row["ratio_cpu_per_call"] = None
        row["run_ratios_calls_per_s"] = None
        if base is None or not base["calls_per_s"] or not row["calls_per_s"]:
            continue
        row["ratio_calls_per_s"] = row["calls_per_s"]["median"] / base["calls_per_s"]["median"]
        if base["server_cpu_us_per_call"] and row["server_cpu_us_per_call"]:
            row["ratio_cpu_per_call"] = (
                base["server_cpu_us_per_call"]["median"] / row["server_cpu_us_per_call"]["median"]
            )
        per_run = []
        for r in records:
            if (r["workload"], r["client"], r["server"]) == (row["workload"], row["client"], row["server"]) and r["ok"]:
                b = base_runs.get((r["workload"], r["client"], r["run"]))
                if b:
                    per_run.append(r["calls_per_s"] / b["calls_per_s"])
        row["run_ratios_calls_per_s"] = _med_range(per_run)
    return rows


# --------------------------------------------------------------------------- reporting


def _fmt_range(mr: Optional[dict], fmt: str) -> str:
    if not mr:
        return "-"
    if mr["n"] == 1:
        return format(mr["median"], fmt)
    return f"{format(mr['median'], fmt)} ({format(mr['min'], fmt)}–{format(mr['max'], fmt)})"


def _med(mr: Optional[dict], fmt: str) -> str:
    return format(mr["median"], fmt) if mr else "-"


def markdown_table(rows: list[dict], names: dict, baseline_name: str) -> str:
    head = (
        f"| Workload | Client | Server | calls/s, median (min–max) | vs {baseline_name} "
        f"| server CPU µs/call, median (min–max) | CPU/call vs {baseline_name} | server cores "
        "| client CPU µs/call | other load, cores | p50 / p99 µs | errors |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        ratio = "-"
        if r["ratio_calls_per_s"] is not None:
            ratio = f"{r['ratio_calls_per_s']:.2f}x"
            rr = r["run_ratios_calls_per_s"]
            if rr and rr["n"] > 1:
                ratio += f" ({rr['min']:.2f}–{rr['max']:.2f})"
        cpu_ratio = f"{r['ratio_cpu_per_call']:.2f}x" if r["ratio_cpu_per_call"] is not None else "-"
        lat = "-"
        if r["p50_us"]:
            lat = f"{r['p50_us']['median']:,.0f} / {r['p99_us']['median']:,.0f}"
        errs = str(r["errors"])
        if r["failed_runs"]:
            errs += f", {r['failed_runs']} failed runs"
        if r["unclean_exits"]:
            errs += f", {r['unclean_exits']} unclean exits"
        lines.append(
            f"| {names.get(r['workload'], r['workload'])} | {names.get(r['client'], r['client'])} "
            f"| {names.get(r['server'], r['server'])} | {_fmt_range(r['calls_per_s'], ',.0f')} | {ratio} "
            f"| {_fmt_range(r['server_cpu_us_per_call'], '.1f')} | {cpu_ratio} "
            f"| {_fmt_range(r['server_cores_used'], '.2f')} | {_med(r['client_cpu_us_per_call'], '.1f')} "
            f"| {_med(r['other_cores'], '.2f')} | {lat} | {errs} |"
        )
    return "\n".join(lines)


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_description() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            mem_gib = round(int(f.readline().split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    go = "not found"
    if shutil.which("go"):
        try:
            go = subprocess.run(["go", "version"], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    commit = None
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
        )
        commit = out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {
        "cpu_model": cpu,
        "cpus_online": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "memory_gib": mem_gib,
        "kernel": platform.release(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "go": go,
        "grpcio": _version("grpcio"),
        "pygrpc_native": _version("pygrpc-native"),
        "git_commit": commit,
        "loadavg_at_start": os.getloadavg(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def describe(m: dict) -> str:
    return (
        f"CPU: {m['cpu_model']}, {m['cpus_usable']} usable of {m['cpus_online']} online, "
        f"{m['memory_gib']} GiB; Linux {m['kernel']}; load avg at start {m['loadavg_at_start'][0]:.2f}\n"
        f"{m['python']}; {m['go']}; grpcio {m['grpcio']}; pygrpc-native {m['pygrpc_native']}"
        + (f"; commit {m['git_commit']}" if m["git_commit"] else "")
    )


def go_build(package: str, dest_dir: Path) -> Path:
    """go build ./bench/<package> into dest_dir; returns the binary's path."""
    out = dest_dir / package
    subprocess.run(
        ["go", "build", "-trimpath", "-o", str(out), f"./bench/{package}"],
        cwd=REPO_ROOT,
        check=True,
        timeout=600,
    )
    return out


def save_results(name: str, payload: dict, markdown: str, outdir: Path = RESULTS_DIR) -> tuple[Path, Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    jpath = outdir / f"{name}-{stamp}.json"
    mpath = outdir / f"{name}-{stamp}.md"
    jpath.write_text(json.dumps(payload, indent=2) + "\n")
    mpath.write_text(markdown + "\n")
    return jpath, mpath
