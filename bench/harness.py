"""Benchmark machinery used by bench.compare.

A benchmark is a list of cells, each a (server kind, client kind, workload).
Each cell is measured ``runs`` times; a measurement starts a fresh server
process, runs one client process against it, and stops the server. The client
prints MEASURE_START / MEASURE_END around its measured window (warmup
excluded), and the driver reads the server's CPU time (utime + stime from
/proc/<pid>/stat) and the client's (its process and every descendant) when it
sees each line, so CPU per call covers the same window as the calls. After the
client's result it reads the server's peak RSS (VmHWM in /proc/<pid>/status).

Runs are interleaved (run 1 of every cell, then run 2, ...) and the server
order is rotated each run, so drift in a noisy machine spreads over all
servers instead of landing on one.

To add a server, client or workload, add a ServerKind / ClientKind / Workload
to the driver's table; servers and clients only need to follow the process
protocols in bench/servers/__init__.py and bench/clients/__init__.py.
"""

from __future__ import annotations

import ast
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
from typing import Callable, Mapping, Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO_ROOT / "bench"
RESULTS_DIR = BENCH_DIR / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
LOOPBACK = "127.0.0.1"

SERVER_START_TIMEOUT_S = 30.0
SERVER_STOP_TIMEOUT_S = 10.0
CLIENT_SLACK_S = 60.0  # beyond warmup + duration: interpreters starting, connecting, draining


# --------------------------------------------------------------------------- kinds


@dataclasses.dataclass(frozen=True)
class Workload:
    key: str
    name: str
    method: str = "/echo.Echo/Say"
    payload: int = 0  # request bytes (streaming: each message's); the server sends them back
    stream_messages: int = 0  # 0: unary; N: server streaming of N messages
    client_messages: int = 0  # N: client streaming of N messages, one response
    pingpong: int = 0  # N: bidi streaming, N messages each waiting for its echo
    short: str = ""  # label for the chart


@dataclasses.dataclass(frozen=True)
class ServerKind:
    key: str
    name: str
    argv: Sequence[str]  # the whole command, e.g. (sys.executable, "-m", "bench.servers.grpcio_sync")
    requires: Optional[str] = None  # a module that must be importable, else the server is skipped
    unavailable: Optional[str] = None  # set when the driver already knows it can't run (e.g. no Go)
    tls: bool = False  # serves TLS: clients connect with the run's CA
    counterpart: Optional[str] = None  # the grpcio server this one replaces ("no cell slower than")
    short: str = ""  # label for the chart
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)  # added to its environment (PGN_TRANSPORT)

    def available(self) -> Optional[str]:
        """None if the server can run here, else why not."""
        if self.unavailable:
            return self.unavailable
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
    # (addr, workload, duration_s, warmup_s, tls) -> full argv; must pass the client's sync flag.
    command: Callable[[str, Workload, float, float, bool], list]
    saturating: bool = False
    startup_s: float = 1.0  # rough extra seconds per measurement, for the ETA
    short: str = ""
    rate: float = 0.0  # paced: the calls/s it starts in all, whatever the server could take; 0: closed loop
    workloads: Optional[Sequence[str]] = None  # the workload keys it runs; None: every one


@dataclasses.dataclass(frozen=True)
class Cell:
    server: ServerKind
    client: ClientKind
    workload: Workload


# --------------------------------------------------------------------------- processes


class Proc:
    """A child process whose stdout lines are read by a thread into a queue."""

    def __init__(self, argv: Sequence[str], label: str, logdir: Path, env: Optional[Mapping[str, str]] = None):
        self.label = label
        self.stderr_path = logdir / f"{label}.stderr"
        self._stderr = open(self.stderr_path, "w+b")
        extra_env = env
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.update(extra_env or {})
        self.popen = subprocess.Popen(
            list(argv),
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            text=True,
            start_new_session=True,  # its own process group: kill() reaches its children too
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
                self.kill()
                return self.popen.returncode, False
        return self.popen.returncode, self.popen.returncode == 0

    def kill(self) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)  # the group is this process's own (new session)
            except OSError:
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


def _ppids() -> dict[int, int]:
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        out[int(name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    return out


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and all its live descendants (the 8-process client)."""
    ppids = _ppids()
    children: dict[int, list] = {}
    for p, pp in ppids.items():
        children.setdefault(pp, []).append(p)
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += cpu_seconds(p)
        except (OSError, ValueError, IndexError):
            continue
        todo.extend(children.get(p, ()))
    return total


def peak_rss_mib(pid: int) -> Optional[float]:
    """VmHWM (peak resident set size) of a live process, in MiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def machine_busy_ticks() -> tuple[int, int]:
    """(busy, total) jiffies over all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    vals = [int(x) for x in parts[:8]]
    idle = vals[3] + vals[4]  # idle + iowait
    return sum(vals) - idle, sum(vals)


# --------------------------------------------------------------------------- one measurement


def measure_once(cell: Cell, duration: float, warmup: float, logdir: Path, tag: str) -> dict:
    server, client, workload = cell.server, cell.client, cell.workload
    rec: dict = {
        "server": server.key,
        "client": client.key,
        "workload": workload.key,
        "ok": False,
    }
    srv = Proc(server.argv, f"{tag}-server", logdir, env=server.env)
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
        rss_idle = peak_rss_mib(srv.pid)

        cli = Proc(client.command(addr, workload, duration, warmup, server.tls), f"{tag}-client", logdir)
        deadline = time.monotonic() + warmup + duration + CLIENT_SLACK_S
        t0 = t1 = None
        result = None
        while result is None:
            line = cli.readline(deadline)
            if line is None:
                raise RuntimeError(f"client exited without a result:\n{cli.stderr_tail()}")
            if line == "MEASURE_START":
                t0 = (time.monotonic(), cpu_seconds(srv.pid), tree_cpu_seconds(cli.pid), machine_busy_ticks())
            elif line == "MEASURE_END":
                t1 = (time.monotonic(), cpu_seconds(srv.pid), tree_cpu_seconds(cli.pid), machine_busy_ticks())
            elif line.startswith("{"):
                result = json.loads(line)
        if t0 is None or t1 is None:
            raise RuntimeError("client printed no MEASURE_START/MEASURE_END")
        rss_peak = peak_rss_mib(srv.pid)
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
            target_rate=result.get("target_rate") or None,
            skipped_slots=result.get("skipped_slots", 0),
            client_duration_s=result["duration_s"],
            window_s=window,
            server_cpu_s=server_cpu,
            client_cpu_s=client_cpu,
            server_cpu_us_per_call=(server_cpu / calls * 1e6) if calls else None,
            client_cpu_us_per_call=(client_cpu / calls * 1e6) if calls else None,
            server_cores_used=server_cpu / window if window > 0 else None,
            server_rss_idle_mib=rss_idle,
            server_rss_peak_mib=rss_peak,
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


def _fmt_eta(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def schedule(cells: Sequence[Cell], runs: int) -> list[tuple[int, Cell]]:
    """The order of measurements: run by run; within a run, cells grouped by
    (workload, client) in the order given, with the servers of each group
    rotated by the run number."""
    groups: dict = {}
    for c in cells:
        groups.setdefault((c.workload.key, c.client.key, c.server.tls), []).append(c)
    order = []
    for run in range(runs):
        for group in groups.values():
            k = run % len(group)
            order.extend((run, c) for c in group[k:] + group[:k])
    return order


def pygrpc_native_dirs() -> list:
    """The folders of the pygrpc_native package the servers import (they
    inherit this process's sys.path: an installed wheel, or under `bazel run`
    the Bazel-built package in the runfiles). Found without importing it
    (importing would start a Go runtime in the driver)."""
    try:
        spec = importlib.util.find_spec("pygrpc_native")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(d) for d in spec.submodule_search_locations]


def build_fingerprint() -> dict:
    """What identifies the pygrpc_native the servers load: path -> (size,
    mtime) of its compiled extension and its Python files."""
    files = {}
    for d in pygrpc_native_dirs():
        for pattern in ("_native*.so", "**/*.py"):
            for f in d.glob(pattern):
                try:
                    st = f.stat()
                except OSError:
                    continue
                files[str(f)] = (st.st_size, st.st_mtime_ns)
    return files


def run_matrix(
    cells: Sequence[Cell],
    runs: int,
    duration: float,
    warmup: float,
    log: Callable[[str], None] = print,
    changes: Optional[list] = None,
) -> list[dict]:
    """Measures every cell `runs` times, printing one progress line (with an
    ETA) per measurement. Returns one record per measurement. If the
    pygrpc_native build (build_fingerprint()) changes during the run, says so
    and appends a line to `changes`: the runs then mix two builds."""
    records = []
    build = build_fingerprint()
    order = schedule(cells, runs)
    total = len(order)
    began = time.monotonic()
    guess = {c.client.key: warmup + duration + c.client.startup_s + 1.0 for c in cells}
    with tempfile.TemporaryDirectory(prefix="pgn-bench-logs-") as tmp:
        logdir = Path(tmp)
        for i, (run, cell) in enumerate(order):
            server, client, workload = cell.server, cell.client, cell.workload
            tag = f"r{run}-{workload.key}-{client.key}-{server.key}"
            t = time.monotonic()
            rec = measure_once(cell, duration, warmup, logdir, tag)
            took = time.monotonic() - t
            guess[client.key] = took if i == 0 else 0.7 * guess[client.key] + 0.3 * took
            rec["run"] = run
            rec["measure_s"] = took
            records.append(rec)
            left = sum(guess[c.client.key] for _, c in order[i + 1 :])
            head = (
                f"[{i + 1:>{len(str(total))}}/{total} {_fmt_eta(time.monotonic() - began)} elapsed,"
                f" ETA {_fmt_eta(left)}] run {run + 1}/{runs} {workload.key} | {client.short or client.key}"
                f" | {server.name}:"
            )
            if rec["ok"]:
                extra = f", {rec['errors']} errors" if rec["errors"] else ""
                if rec["skipped_slots"]:
                    extra += f", {rec['skipped_slots']:,} paced slots skipped"
                rss = rec["server_rss_peak_mib"]
                log(
                    f"{head} {rec['calls_per_s']:,.0f} calls/s,"
                    f" p50 {rec['p50_us']:,.0f} µs, p99 {rec['p99_us']:,.0f} µs,"
                    f" server {rec['server_cpu_us_per_call']:.1f} µs CPU/call ({rec['server_cores_used']:.2f} cores),"
                    f" RSS {rss:.0f} MiB, others {rec['other_cores']:.2f} cores" + extra
                )
            else:
                why = (rec.get("failure") or "no calls").splitlines()[0]
                log(f"{head} FAILED {why}")
            now = build_fingerprint()
            if now != build:
                changed = sorted(Path(f).name for f in set(now) | set(build) if now.get(f) != build.get(f))
                msg = (
                    f"pygrpc_native changed on disk around measurement {i + 1}/{total} "
                    f"({', '.join(changed)}): the results mix two versions"
                )
                log("WARNING: " + msg)
                if changes is not None:
                    changes.append(msg)
                build = now
    return records


def _med_range(vals: list) -> Optional[dict]:
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


METRICS = (
    "calls_per_s",
    "server_cpu_us_per_call",
    "client_cpu_us_per_call",
    "server_cores_used",
    "server_rss_peak_mib",
    "other_cores",
    "p50_us",
    "p99_us",
)


def summarize(records: list[dict]) -> list[dict]:
    """One row per (workload, client, server), in the order first measured:
    median and min–max over the runs of every metric."""
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
            "errors": sum(r.get("errors", 0) for r in rs),
            "unclean_exits": sum(1 for r in good if not r.get("server_exited_cleanly")),
            "vs": {},
        }
        for m in METRICS:
            row[m] = _med_range([r.get(m) for r in good])
        rows.append(row)
    return rows


def add_ratio(rows: list[dict], records: list[dict], row: dict, base_key: str) -> Optional[dict]:
    """Compares `row` with server `base_key` (same workload and client, same
    invocation) and stores the result in row["vs"][base_key]:

    calls: median calls/s over the baseline's median; calls_runs: the range of
    per-run ratios (run i against run i of the baseline); cpu: the baseline's
    server CPU per call over this row's (above 1: this one is cheaper);
    cpu_cost: this row's CPU per call over the baseline's (below 1: cheaper).
    """
    base = next(
        (b for b in rows if (b["workload"], b["client"], b["server"]) == (row["workload"], row["client"], base_key)),
        None,
    )
    if base is None or not base["calls_per_s"] or not row["calls_per_s"]:
        return None
    out = {"calls": row["calls_per_s"]["median"] / base["calls_per_s"]["median"]}
    base_cpu, row_cpu = base["server_cpu_us_per_call"], row["server_cpu_us_per_call"]
    if base_cpu and row_cpu and base_cpu["median"] > 0 and row_cpu["median"] > 0:
        # (A server so starved that a run measured no CPU gives no ratio.)
        out["cpu"] = base_cpu["median"] / row_cpu["median"]
        out["cpu_cost"] = 1 / out["cpu"]
    base_runs = {
        r["run"]: r
        for r in records
        if r["ok"] and (r["workload"], r["client"], r["server"]) == (row["workload"], row["client"], base_key)
    }
    per_run = [
        r["calls_per_s"] / base_runs[r["run"]]["calls_per_s"]
        for r in records
        if r["ok"]
        and (r["workload"], r["client"], r["server"]) == (row["workload"], row["client"], row["server"])
        and r["run"] in base_runs
        and base_runs[r["run"]]["calls_per_s"]
    ]
    out["calls_runs"] = _med_range(per_run)
    row["vs"][base_key] = out
    return out


# --------------------------------------------------------------------------- reporting


def fmt_range(mr: Optional[dict], fmt: str, scale: float = 1.0, with_range: bool = True) -> str:
    if not mr:
        return "-"
    med = format(mr["median"] * scale, fmt)
    if mr["n"] == 1 or not with_range:
        return med
    return f"{med} ({format(mr['min'] * scale, fmt)}–{format(mr['max'] * scale, fmt)})"


def fmt_ratio(vs: Optional[dict], key: str = "calls", with_range: bool = True) -> str:
    if not vs or key not in vs:
        return "-"
    text = f"{vs[key]:.2f}x"
    rr = vs.get("calls_runs") if key == "calls" else None
    if with_range and rr and rr["n"] > 1:
        text += f" ({rr['min']:.2f}–{rr['max']:.2f})"
    return text


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def pygrpc_native_description() -> str:
    """Which pygrpc_native the servers import: the installed distribution's
    version when that is where it comes from; else (a Bazel-built package in
    the runfiles, a source tree on PYTHONPATH) its __version__ and folder."""
    dirs = pygrpc_native_dirs()
    if not dirs:
        return "not installed"
    try:
        dist = importlib.metadata.distribution("pygrpc-native")
        if Path(dist.locate_file("pygrpc_native")).resolve() == dirs[0].resolve():
            return dist.version
    except importlib.metadata.PackageNotFoundError:
        pass
    return f"{_declared_version(dirs[0] / '__init__.py')} (not installed: from {dirs[0]})"


def _declared_version(init_py: Path) -> str:
    """The `__version__ = "..."` assignment of a package's __init__.py, read
    without importing it; "?" if there is none."""
    try:
        tree = ast.parse(init_py.read_text())
    except (OSError, SyntaxError):
        return "?"
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
            and isinstance(node.value, ast.Constant)
        ):
            return str(node.value.value)
    return "?"


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
    go = "Go not found"
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
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "go", "python", "setup.py", "pyproject.toml"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        if commit and dirty:
            commit += " + uncommitted changes in go/ or python/"
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
        "uvloop": _version("uvloop"),
        "pygrpc_native": pygrpc_native_description(),
        "git_commit": commit,
        "loadavg_at_start": os.getloadavg(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def describe(m: dict) -> str:
    return (
        f"CPU: {m['cpu_model']}, {m['cpus_usable']} usable of {m['cpus_online']} online, "
        f"{m['memory_gib']} GiB; Linux {m['kernel']}; load avg at start {m['loadavg_at_start'][0]:.2f}; {m['date']}\n"
        f"{m['python']}; {m['go']}; grpcio {m['grpcio']}; uvloop {m['uvloop']}; "
        f"pygrpc-native {m['pygrpc_native']}" + (f"; commit {m['git_commit']}" if m["git_commit"] else "")
    )


# The ceiling runs the Go front with the runtime settings the library is
# built with (setup.py's GODEBUG); the other Go tools keep Go's defaults.
_LIBRARY_LDFLAGS = {"ceiling": "-X=runtime.godebugDefault=gcshrinkstackoff=1"}


def go_build(package: str, dest_dir: Path) -> Path:
    """go build ./bench/<package> into dest_dir; returns the binary's path."""
    out = dest_dir / package
    subprocess.run(
        ["go", "build", "-trimpath", f"-ldflags={_LIBRARY_LDFLAGS.get(package, '')}", "-o", str(out),
         f"./bench/{package}"],
        cwd=REPO_ROOT,
        check=True,
        timeout=600,
    )
    return out


def stamp() -> str:
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
