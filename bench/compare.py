"""pygrpc-native against grpcio, in one run on one machine.

    python -m bench.compare            # the full table: 5 runs x 3 s per cell, about 32 minutes on 2 cores
    python -m bench.compare --tls      # and the TLS rows (about 36 minutes)
    python -m bench.compare --quick    # a smoke check in under 2 minutes

Servers: grpc.server(), grpc.aio.server(), pygrpc_native.server() (with 4
and 16 workers), pygrpc_native.aio.server() (on asyncio and on uvloop), the
low-level API (NativeGrpcFront), the ceiling: the same Go front answering in
Go, with no Python, and plain grpc-go, the reference for CPU per call; our
servers on either transport behind the Go front (grpc-go's and the front's
own, h2). Clients: one grpcio client thread; 32 grpcio client threads as 8
processes x 4 threads; the Go load generator (bench/loadgen), which saturates
the server, and the same paced at 4,000 calls/s (empty unary only).
Workloads: empty unary, 1 KiB, 64 KiB and 1 MiB unary, server streaming of
100 messages, client streaming of 100 messages, bidi ping-pong of 100
messages. Per cell: calls/s (median of the runs, min–max), p50 and p99
latency, server CPU seconds per 1,000 calls, server peak RSS, and ratios to
grpc.server() (and grpc.aio.server() for the aio rows) from the same run; then
the targets of issues 7, 14, 23 and 24, each met or NOT met. Writes the table
(markdown), a PNG chart and every measurement (JSON) to bench/results/.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from bench import harness
from bench.harness import Cell, ClientKind, ServerKind, Workload

BASELINE = "grpcio_sync"
AIO_BASELINE = "grpcio_aio"
CEILING = "ceiling"
CEILING_SERVERS = (CEILING, "ceiling_h2")  # the rows that run the ceiling binary
TLS_BASELINE = "grpcio_sync_tls"
AIO_SERVERS = (
    "grpcio_aio", "native_aio", "native_aio_uvloop", "native_aio_h2", "native_aio_uvloop_h2", "native_aio_prom", "native_aio_prom_h2",
)  # fmt: skip

# Our servers' environment, naming the transport behind the Go front: every
# row says which it measures, whatever PGN_TRANSPORT the run inherited.
ON_GRPCGO = {"PGN_TRANSPORT": "grpcgo"}
ON_H2 = {"PGN_TRANSPORT": "h2"}
# The rows measured on both transports: the grpc-go transport's key, and the
# h2 row's name (its key is the same + "_h2").
H2_ROWS = {
    "native_sync": "pygrpc_native.server(), h2 transport",
    "native_sync16": "pygrpc_native.server(), 16 workers, h2 transport",
    "native_aio": "pygrpc_native.aio.server(), h2 transport",
    "native_aio_uvloop": "pygrpc_native.aio.server() + uvloop, h2 transport",
    "lowlevel": "Low-level API, h2 transport",
    "ceiling": "Ceiling, h2 transport",
    "native_sync_prom": "pygrpc_native.server() + Prometheus endpoint, h2 transport",
    "native_sync_otel": "pygrpc_native.server() + OpenTelemetry plugin, h2 transport",
    "native_aio_prom": "pygrpc_native.aio.server() + Prometheus endpoint, h2 transport",
    "lowlevel_prom": "Low-level API + Prometheus endpoint, h2 transport",
    "ceiling_prom": "Ceiling + Prometheus endpoint, h2 transport",
}

# The rows measured with the Prometheus endpoint on (key + "_prom"): the
# flag that turns it on in each base row's server.
PROM_FLAGS = {
    "native_sync": ("--metrics", "prometheus"),
    "native_aio": ("--metrics", "prometheus"),
    "lowlevel": ("--metrics", "prometheus"),
    "ceiling": ("-metrics",),
}

DEFAULT_SERVERS = (
    "grpcio_sync,native_sync,native_sync16,grpcio_aio,native_aio,native_aio_uvloop,lowlevel,ceiling,grpcgo,"
    "native_sync_h2,native_sync16_h2,native_aio_h2,native_aio_uvloop_h2,lowlevel_h2,ceiling_h2"
)
# The metrics rows (A66 metrics on; README "Observability"): opt-in with
# --servers, as their cost is measured against native_sync's (or
# native_sync_h2's), not tracked by the targets. The plugin rows run in
# build/venv-otel (scripts/test.sh makes it): grpcio-observability pins
# another grpcio.
METRICS_SERVERS = (
    "native_sync_prom,native_sync_otel,native_sync_prom_h2,native_sync_otel_h2,grpcio_sync_otel,"
    "native_aio_prom_h2,lowlevel_prom_h2,ceiling_prom_h2"
)
ALL_SERVERS = DEFAULT_SERVERS + ",grpcio_sync_tls,native_sync_tls," + METRICS_SERVERS
OTEL_PYTHON = harness.REPO_ROOT / "build" / "venv-otel" / "bin" / "python"
GRPCGO = "grpcgo"
DEFAULT_CLIENTS = "grpcio_1thread,grpcio_8x4,loadgen,loadgen_paced"
PACED = "loadgen_paced"
LOADGEN_CLIENTS = ("loadgen", PACED)  # the clients that run the Go loadgen
# loadgen_paced: issue 24's ordinary load, 8 connections x 4 callers starting
# --paced-rate calls/s in all. Below the servers' capacity, so every server
# answers the same calls/s and CPU per call is what differs; it runs only
# these workloads (at 4,000 calls/s the larger ones would saturate 2 cores).
PACED_CONNS, PACED_CALLERS = 8, 4
PACED_WORKLOADS = ("empty",)
# A paced cell that reached less than this share of the rate fell behind: noted.
PACED_SHORTFALL = 0.95
DEFAULT_WORKLOADS = "empty,1k,64k,1m,stream100,client100,bidi100"
TLS_SERVERS = ("grpcio_sync_tls", "native_sync_tls")
TLS_WORKLOADS = ("empty", "64k")  # the TLS rows run these of the chosen workloads

# --quick: 1 run of 1 s (+0.5 s warmup) per cell, these clients and workloads.
QUICK_CLIENTS = "grpcio_1thread,loadgen"
QUICK_WORKLOADS = "empty,stream100"

WORKLOADS = {
    w.key: w
    for w in (
        Workload("empty", "Empty unary", short="empty unary"),
        Workload("1k", "1 KiB unary", payload=1024, short="1 KiB unary"),
        Workload("64k", "64 KiB unary", payload=65536, short="64 KiB unary"),
        Workload("1m", "1 MiB unary", payload=1 << 20, short="1 MiB unary"),
        Workload(
            "stream100",
            "Server streaming, 100 empty messages per call",
            method="/echo.Echo/Count",
            stream_messages=100,
            short="streaming x100",
        ),
        Workload(
            "client100",
            "Client streaming, 100 empty messages per call",
            method="/echo.Echo/Collect",
            client_messages=100,
            short="client streaming x100",
        ),
        Workload(
            "bidi100",
            "Bidi streaming, 100 empty ping-pong echoes per call",
            method="/echo.Echo/Chat",
            pingpong=100,
            short="bidi ping-pong x100",
        ),
    )
}
STREAM_WORKLOADS = ("client100", "bidi100")  # the request-streaming workloads (their own targets)


def _split(text: str) -> list[str]:
    return [k.strip() for k in text.split(",") if k.strip()]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=5, help="measurements per cell (default 5)")
    p.add_argument("--duration", type=float, default=3.0, help="measured seconds per run (default 3)")
    p.add_argument("--warmup", type=float, default=1.0, help="warmup seconds per run, not measured (default 1)")
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke check: 1 run x 1 s (+0.5 s warmup), clients {QUICK_CLIENTS}, workloads {QUICK_WORKLOADS} "
        "(unless --clients / --workloads say otherwise)",
    )
    p.add_argument("--servers", help=f"comma-separated, from {ALL_SERVERS} (default {DEFAULT_SERVERS})")
    p.add_argument("--clients", help=f"comma-separated, from {DEFAULT_CLIENTS} (default: all)")
    p.add_argument("--workloads", help=f"comma-separated, from {DEFAULT_WORKLOADS} (default: all)")
    p.add_argument(
        "--tls",
        action="store_true",
        help="add the TLS rows: pygrpc_native.server() and grpc.server() with TLS "
        f"({', '.join(TLS_WORKLOADS)} workloads, every chosen client)",
    )
    p.add_argument(
        "--grpcio-workers", type=int, default=4, help="ThreadPoolExecutor max_workers of both server()s (default 4)"
    )
    p.add_argument("--lowlevel-threads", type=int, default=1, help="Python threads calling recv_batch (default 1)")
    p.add_argument("--conns", type=int, default=4, help="loadgen connections (default 4)")
    p.add_argument("--concurrency", type=int, default=32, help="loadgen calls in flight per connection (default 32)")
    p.add_argument(
        "--paced-rate",
        type=float,
        default=4000.0,
        help="calls/s in total of the paced loadgen client (loadgen_paced; default 4000)",
    )
    p.add_argument("--loadgen", help="use this loadgen binary instead of building bench/loadgen")
    p.add_argument("--ceiling", help="use this ceiling binary instead of building bench/ceiling")
    p.add_argument("--goserver", help="use this grpc-go server binary instead of building bench/goserver")
    p.add_argument("--no-save", action="store_true", help="don't write bench/results/")
    p.add_argument("--no-chart", action="store_true", help="don't draw the PNG chart")
    args = p.parse_args(argv)
    if args.quick:
        args.runs, args.duration, args.warmup = 1, 1.0, 0.5
        args.clients = args.clients or QUICK_CLIENTS
        args.workloads = args.workloads or QUICK_WORKLOADS
    args.servers = _split(args.servers or DEFAULT_SERVERS)
    args.clients = _split(args.clients or DEFAULT_CLIENTS)
    args.workloads = _split(args.workloads or DEFAULT_WORKLOADS)
    if args.tls:
        args.servers += [k for k in TLS_SERVERS if k not in args.servers]
    if args.runs < 1 or args.duration <= 0 or args.warmup < 0 or args.paced_rate <= 0:
        p.error("--runs must be >= 1, --duration > 0, --warmup >= 0, --paced-rate > 0")
    for what, keys, known in (
        ("server", args.servers, _split(ALL_SERVERS)),
        ("client", args.clients, _split(DEFAULT_CLIENTS)),
        ("workload", args.workloads, _split(DEFAULT_WORKLOADS)),
    ):
        for k in keys:
            if k not in known:
                p.error(f"unknown {what} {k!r} (known: {', '.join(known)})")
        if not keys:
            p.error(f"no {what} chosen")
    return args


def go_tool(name: str, given: Optional[str], needed: bool, tmp: Path) -> tuple[Optional[Path], Optional[str]]:
    """(binary, None) or (None, why not): the given path, or go build ./bench/<name>."""
    if not needed:
        return None, None
    if given:
        return Path(given), None
    if shutil.which("go") is None:
        return None, f"Go not found to build bench/{name} (or pass --{name} PATH)"
    print(f"building bench/{name} ...", flush=True)
    try:
        return harness.go_build(name, tmp), None
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"go build ./bench/{name} failed: {e}"


def server_kinds(args, ceiling: Optional[Path], goserver: Optional[Path], tls, why: dict) -> dict:
    py = sys.executable
    workers = ("--workers", str(args.grpcio_workers))
    tls_args = ("--tls-cert", str(tls.cert), "--tls-key", str(tls.key)) if tls else ()
    kinds = {
        s.key: s
        for s in (
            ServerKind("grpcio_sync", "grpc.server()", (py, "-m", "bench.servers.grpcio_sync", *workers)),
            ServerKind(
                "native_sync",
                "pygrpc_native.server()",
                (py, "-m", "bench.servers.grpcio_sync", "--impl", "native", *workers),
                requires="pygrpc_native",
                counterpart="grpcio_sync",
                env=ON_GRPCGO,
            ),
            ServerKind(
                "native_sync16",
                "pygrpc_native.server(), 16 workers",
                (py, "-m", "bench.servers.grpcio_sync", "--impl", "native", "--workers", "16"),
                requires="pygrpc_native",
                counterpart="grpcio_sync",
                env=ON_GRPCGO,
            ),
            ServerKind("grpcio_aio", "grpc.aio.server()", (py, "-m", "bench.servers.aio_echo", "--impl", "grpcio")),
            ServerKind(
                "native_aio",
                "pygrpc_native.aio.server()",
                (py, "-m", "bench.servers.aio_echo", "--impl", "native"),
                requires="pygrpc_native",
                counterpart="grpcio_aio",
                env=ON_GRPCGO,
            ),
            ServerKind(
                "native_aio_uvloop",
                "pygrpc_native.aio.server() + uvloop",
                (py, "-m", "bench.servers.aio_echo", "--impl", "native", "--uvloop"),
                requires="pygrpc_native.aio, uvloop",
                counterpart="grpcio_aio",
                env=ON_GRPCGO,
            ),
            ServerKind(
                "lowlevel",
                "Low-level API (NativeGrpcFront)",
                (py, "-m", "bench.servers.lowlevel", "--threads", str(args.lowlevel_threads)),
                requires="pygrpc_native",
                counterpart="grpcio_sync",
                env=ON_GRPCGO,
            ),
            ServerKind(
                "ceiling",
                "Ceiling: the Go front answering in Go",
                (str(ceiling),),
                unavailable=why.get("ceiling"),
                env=ON_GRPCGO,
            ),
            ServerKind("grpcgo", "grpc-go alone", (str(goserver),), unavailable=why.get("goserver")),
            ServerKind(
                "native_sync_otel",
                "pygrpc_native.server() + OpenTelemetry plugin",
                (str(OTEL_PYTHON), "-m", "bench.servers.grpcio_sync", "--impl", "native", *workers, "--metrics", "otel"),
                unavailable=None if OTEL_PYTHON.exists() else f"no {OTEL_PYTHON} (scripts/test.sh makes it)",
                counterpart="grpcio_sync_otel",
                env=ON_GRPCGO,
            ),
            ServerKind(
                "grpcio_sync_otel",
                "grpc.server() + OpenTelemetry plugin",
                (str(OTEL_PYTHON), "-m", "bench.servers.grpcio_sync", *workers, "--metrics", "otel"),
                unavailable=None if OTEL_PYTHON.exists() else f"no {OTEL_PYTHON} (scripts/test.sh makes it)",
            ),
            ServerKind(
                "grpcio_sync_tls",
                "grpc.server() + TLS",
                (py, "-m", "bench.servers.grpcio_sync", *workers, *tls_args),
                tls=True,
            ),
            ServerKind(
                "native_sync_tls",
                "pygrpc_native.server() + TLS",
                (py, "-m", "bench.servers.grpcio_sync", "--impl", "native", *workers, *tls_args),
                requires="pygrpc_native",
                tls=True,
                counterpart="grpcio_sync_tls",
                        ),
        )
    }
    # The same servers on the front's own transport (h2).
    # The rows with the Prometheus endpoint on: the base row's command
    # with its metrics flag.
    for key, flag in PROM_FLAGS.items():
        base = kinds[key]
        kinds[f"{key}_prom"] = dataclasses.replace(
            base,
            key=f"{key}_prom",
            name=f"{base.name} + Prometheus endpoint",
            argv=(*base.argv, *flag),
        )
    for key, name in H2_ROWS.items():
        base = kinds[key]
        kinds[f"{key}_h2"] = dataclasses.replace(base, key=f"{key}_h2", name=name, env=ON_H2)
    return kinds


def client_kinds(args, loadgen: Optional[Path], tls) -> dict:
    def grpcio(procs: int, threads: int):
        def command(addr: str, w: Workload, duration: float, warmup: float, use_tls: bool) -> list:
            argv = [
                sys.executable, "-m", "bench.clients.grpcio_client", "--sync", "--addr", addr,
                "--method", w.method, "--payload", str(w.payload), "--stream-messages", str(w.stream_messages),
                "--procs", str(procs), "--threads", str(threads),
                "--duration", str(duration), "--warmup", str(warmup),
            ]  # fmt: skip
            if w.client_messages:
                argv += ["--client-messages", str(w.client_messages)]
            if w.pingpong:
                argv += ["--pingpong", str(w.pingpong)]
            if use_tls:
                argv += ["--ca", str(tls.ca), "--server-name", tls.server_name]
            return argv

        return command

    def go_client(conns: int, concurrency: int, rate: float = 0.0):
        def command(addr: str, w: Workload, duration: float, warmup: float, use_tls: bool) -> list:
            argv = [
                str(loadgen), "-sync", "-addr", addr, "-method", w.method, "-payload", str(w.payload),
                "-stream-messages", str(w.stream_messages),
                "-conns", str(conns), "-concurrency", str(concurrency),
                "-duration", f"{duration}s", "-warmup", f"{warmup}s",
            ]  # fmt: skip
            # Only when set, so a -loadgen binary from before these flags still runs the other workloads.
            if w.client_messages:
                argv += ["-client-messages", str(w.client_messages)]
            if w.pingpong:
                argv += ["-pingpong", str(w.pingpong)]
            if rate:
                argv += ["-rate", f"{rate:g}"]
            if use_tls:
                argv += ["-tls", "-ca", str(tls.ca), "-server-name", tls.server_name]
            return argv

        return command

    return {
        c.key: c
        for c in (
            ClientKind("grpcio_1thread", "1 grpcio client thread", grpcio(1, 1), short="1 grpcio thread"),
            ClientKind(
                "grpcio_8x4",
                "32 grpcio client threads (8 processes x 4)",
                grpcio(8, 4),
                startup_s=3.0,
                short="32 grpcio threads (8x4)",
            ),
            ClientKind(
                "loadgen",
                f"Go loadgen ({args.conns} connections x {args.concurrency} calls in flight)",
                go_client(args.conns, args.concurrency),
                saturating=True,
                startup_s=0.5,
                short="Go loadgen",
            ),
            ClientKind(
                PACED,
                f"Go loadgen paced at {args.paced_rate:,.0f} calls/s ({PACED_CONNS} connections x {PACED_CALLERS})",
                go_client(PACED_CONNS, PACED_CALLERS, args.paced_rate),
                rate=args.paced_rate,
                workloads=PACED_WORKLOADS,
                startup_s=0.5,
                short=f"Go loadgen, {args.paced_rate:,.0f}/s",
            ),
        )
    }


# --------------------------------------------------------------------------- targets


def _row(rows, server, client="loadgen", workload="empty"):
    return next(
        (r for r in rows if (r["server"], r["client"], r["workload"]) == (server, client, workload) and r["calls_per_s"]),
        None,
    )


def check_targets(
    rows: list[dict], records: list[dict], names: dict, counterparts: dict
) -> list[tuple[str, Optional[bool], str]]:
    """The targets of issues 7, 14, 23 and 24 as (target, met (None: not
    measured), the numbers)."""
    out: list = []

    def ratio(server, base, client="loadgen", workload="empty", what="calls"):
        row = _row(rows, server, client, workload)
        if row is None or _row(rows, base, client, workload) is None:
            return None, None
        vs = row["vs"].get(base) or harness.add_ratio(rows, records, row, base)
        return (vs or {}).get(what), (vs or {}).get("calls_runs")

    def at_least(label, server, base, target, client="loadgen", as_percent=False):
        value, runs = ratio(server, base, client)
        if value is None:
            out.append((label, None, f"not measured ({names.get(server, server)} or {names.get(base, base)} missing)"))
            return
        if as_percent:
            text = f"{value:.0%}"
            if runs and runs["n"] > 1:
                text += f" (runs {runs['min']:.0%}–{runs['max']:.0%})"
        else:
            text = f"{value:.2f}x"
            if runs and runs["n"] > 1:
                text += f" (runs {runs['min']:.2f}–{runs['max']:.2f}x)"
        out.append((label, value >= target, text))

    at_least("pygrpc_native.server() >= 8x grpc.server() (Go loadgen, empty unary)", "native_sync", BASELINE, 8.0)
    at_least("pygrpc_native.server() >= 45% of the ceiling's calls/s", "native_sync", CEILING, 0.45, as_percent=True)
    for key in ("native_aio", "native_aio_uvloop"):
        at_least(f"{names[key]} >= 5x grpc.aio.server() (Go loadgen, empty unary)", key, AIO_BASELINE, 5.0)
        at_least(f"{names[key]} >= 45% of the ceiling's calls/s", key, CEILING, 0.45, as_percent=True)
    at_least("Low-level API >= 70% of the ceiling's calls/s", "lowlevel", CEILING, 0.70, as_percent=True)

    cost, _ = ratio("native_sync", CEILING, what="cpu_cost")
    if cost is None:
        out.append(("pygrpc_native.server() CPU per call <= 2x the ceiling's", None, "not measured"))
    else:
        a = _row(rows, "native_sync")["server_cpu_us_per_call"]["median"]
        b = _row(rows, CEILING)["server_cpu_us_per_call"]["median"]
        out.append(
            (
                "pygrpc_native.server() CPU per call <= 2x the ceiling's",
                cost <= 2.0,
                f"{cost:.2f}x ({a / 1e3:.4f} vs {b / 1e3:.4f} s per 1,000 calls)",
            )
        )
    for key in ("native_sync", "native_aio", "native_aio_uvloop", "lowlevel"):
        base = BASELINE if key in ("native_sync", "lowlevel") else AIO_BASELINE
        at_least(
            f"1 grpcio client thread: {names[key]} >= 1.5x {names[base]} (empty unary)",
            key,
            base,
            1.5,
            client="grpcio_1thread",
        )

    out.extend(issue14_targets(rows, names))
    out.extend(stream_targets(rows, names))
    out.extend(issue24_targets(rows, names))

    slower, compared = [], 0
    for row in rows:
        base = counterparts.get(row["server"])
        # A paced client asks every server for the same calls/s, so its
        # cells don't say which is faster (paced_shortfalls notes a server
        # that could not keep up).
        if base is None or row["client"] == PACED or not row["calls_per_s"]:
            continue
        if _row(rows, base, row["client"], row["workload"]) is None:
            continue
        vs = row["vs"].get(base) or harness.add_ratio(rows, records, row, base)
        compared += 1
        if vs["calls"] < 1.0:
            rr = vs.get("calls_runs")
            rng = f" (runs {rr['min']:.2f}–{rr['max']:.2f})" if rr and rr["n"] > 1 else ""
            slower.append(
                f"{names[row['server']]}, {names[row['client']]}, {names[row['workload']]}: "
                f"{vs['calls']:.2f}x {names[base]}{rng}"
            )
    if compared == 0:
        out.append(("No cell slower than its grpcio counterpart", None, "no pairs measured"))
    else:
        out.append(
            (
                "No cell slower than its grpcio counterpart (every client and workload, TLS included)",
                not slower,
                f"{compared - len(slower)} of {compared} cells at least as fast"
                + ("; slower:" + "".join(f"\n  - {cell}" for cell in slower) if slower else ""),
            )
        )
    return out


# Issue 14: server CPU per call relative to plain grpc-go (the grpcgo row) in
# the same workload under the Go loadgen, at most this much.
CPU_VS_GRPCGO = {
    "lowlevel": {"empty": 0.9, "64k": 0.85, "stream100": 2.5},
    "native_sync": {"empty": 1.85, "64k": 1.0, "stream100": 3.0},
    "native_sync16": {"empty": 1.85, "64k": 1.0, "stream100": 3.0},
    "native_aio": {"empty": 1.5, "64k": 1.0, "stream100": 2.5},
    "native_aio_uvloop": {"empty": 1.5, "64k": 1.0, "stream100": 2.5},
    CEILING: {"empty": 0.75, "64k": 0.8, "stream100": 1.2},
}


def _median(row: Optional[dict], metric: str) -> Optional[float]:
    value = row and row.get(metric)
    return value["median"] if value else None


def cpu_at_most(
    rows: list[dict], label: str, server: str, base: str, limit: float, client="loadgen", workload="empty"
) -> tuple[str, Optional[bool], str]:
    """(label, met, the numbers): `server`'s median server CPU per call at
    most `limit` times `base`'s in the same cell (client, workload); met is
    None when either was not measured."""
    ours = _median(_row(rows, server, client, workload), "server_cpu_us_per_call")
    theirs = _median(_row(rows, base, client, workload), "server_cpu_us_per_call")
    if ours is None or not theirs:
        return label, None, "not measured"
    return label, ours <= limit * theirs, f"{ours / theirs:.2f}x ({ours:.1f} vs {theirs:.1f} µs)"


def issue14_targets(rows: list[dict], names: dict) -> list[tuple[str, Optional[bool], str]]:
    """Issue 14's targets: CPU per call against grpc-go alone, server() with
    16 workers against 4, latency with one grpcio client thread, peak RSS."""
    out: list = []
    for server, limits in CPU_VS_GRPCGO.items():
        for workload, limit in limits.items():
            label = f"{names.get(server, server)} CPU per call <= {limit}x grpc-go alone's ({workload}, Go loadgen)"
            out.append(cpu_at_most(rows, label, server, GRPCGO, limit, workload=workload))
    for workload in ("empty", "64k", "stream100"):
        label = f"server() CPU per call with 16 workers within 10% of 4 workers' ({workload})"
        out.append(cpu_at_most(rows, label, "native_sync16", "native_sync", 1.1, workload=workload))
    go_p50 = _median(_row(rows, GRPCGO, client="grpcio_1thread"), "p50_us")
    for server, limit in (("lowlevel", 1.0), ("native_sync", 1.3)):
        label = f"1 grpcio client thread: {names.get(server, server)} p50 latency <= {limit}x grpc-go alone's (empty)"
        p50 = _median(_row(rows, server, client="grpcio_1thread"), "p50_us")
        if p50 is None or go_p50 is None:
            out.append((label, None, "not measured"))
        else:
            out.append((label, p50 <= limit * go_p50, f"{p50:.0f} vs {go_p50:.0f} µs"))
    grpcio_rss = [_median(r, "server_rss_peak_mib") for r in rows if r["server"] == BASELINE]
    grpcio_peak = max((v for v in grpcio_rss if v is not None), default=None)
    for server in ("native_sync", "native_sync16", "native_aio", "lowlevel"):
        label = f"{names.get(server, server)} peak RSS <= grpc.server()'s + 10 MiB"
        ours = [_median(r, "server_rss_peak_mib") for r in rows if r["server"] == server]
        peak = max((v for v in ours if v is not None), default=None)
        if peak is None or grpcio_peak is None:
            out.append((label, None, "not measured"))
        else:
            out.append((label, peak <= grpcio_peak + 10, f"{peak:.0f} vs {grpcio_peak:.0f} MiB"))
    return out


# Issue 24: the servers on the front's own transport (h2), server CPU per
# call at most this multiple of grpc-go alone's (G) in the same cell, per
# (client, workload): the Go loadgen's empty, 64 KiB and stream-of-100 cells
# and the paced client's empty one. server() is held to it with 4 and 16
# workers alike.
_H2_SERVER_API = {("loadgen", "empty"): 1.3, ("loadgen", "64k"): 1.0, ("loadgen", "stream100"): 2.5}
H2_CPU_VS_GRPCGO = {
    "ceiling_h2": {
        ("loadgen", "empty"): 0.6,
        (PACED, "empty"): 0.7,
        ("loadgen", "64k"): 0.6,
        ("loadgen", "stream100"): 1.0,
    },
    "lowlevel_h2": {
        ("loadgen", "empty"): 0.85,
        (PACED, "empty"): 0.9,
        ("loadgen", "64k"): 0.85,
        ("loadgen", "stream100"): 1.6,
    },
    "native_aio_h2": _H2_SERVER_API,
    "native_sync_h2": _H2_SERVER_API,
    "native_sync16_h2": _H2_SERVER_API,
}
# "If the metrics issue has landed, the targets hold with its metrics on":
# the same limits for the rows with A66 metrics recorded (a Prometheus
# endpoint; opt-in rows, METRICS_SERVERS).
for _server in ("ceiling", "lowlevel", "native_aio", "native_sync"):
    H2_CPU_VS_GRPCGO[f"{_server}_prom_h2"] = H2_CPU_VS_GRPCGO[f"{_server}_h2"]
# Issue 24, under 32 grpcio client threads (empty unary): each server on h2
# at least 20% below the same server on grpc-go's transport in CPU per call.
H2_VS_GRPCGO_TRANSPORT = 0.8
H2_PAIRS = (
    ("ceiling_h2", CEILING),
    ("lowlevel_h2", "lowlevel"),
    ("native_aio_h2", "native_aio"),
    ("native_sync_h2", "native_sync"),
    ("native_sync16_h2", "native_sync16"),
)


def issue24_targets(rows: list[dict], names: dict) -> list[tuple[str, Optional[bool], str]]:
    """Issue 24's targets for the front's own transport: CPU per call as a
    multiple of grpc-go alone's (H2_CPU_VS_GRPCGO), and against the same
    server on grpc-go's transport under 32 grpcio client threads."""
    out = []
    for server, limits in H2_CPU_VS_GRPCGO.items():
        for (client, workload), limit in limits.items():
            via = "Go loadgen" if client == "loadgen" else names.get(client, client)
            label = f"{names.get(server, server)} CPU per call <= {limit}x grpc-go alone's ({workload}, {via})"
            out.append(cpu_at_most(rows, label, server, GRPCGO, limit, client=client, workload=workload))
    for h2, grpcgo_transport in H2_PAIRS:
        label = (
            f"32 grpcio client threads: {names.get(grpcgo_transport, grpcgo_transport)} CPU per call on the h2 "
            f"transport at least {1 - H2_VS_GRPCGO_TRANSPORT:.0%} below grpc-go's transport (empty)"
        )
        out.append(cpu_at_most(rows, label, h2, grpcgo_transport, H2_VS_GRPCGO_TRANSPORT, client="grpcio_8x4"))
    return out


def paced_shortfalls(rows: list[dict], clients: dict, names: dict) -> list[str]:
    """Notes for the paced cells whose server fell behind the rate (below
    PACED_SHORTFALL of it): their CPU per call is at the load the server
    could take, not at the one asked for."""
    notes = []
    for r in rows:
        rate = clients[r["client"]].rate
        got = _median(r, "calls_per_s")
        if rate and got is not None and got < PACED_SHORTFALL * rate:
            notes.append(
                f"- {names[r['server']]}, {names[r['client']]}, {names[r['workload']]}: "
                f"{got:,.0f} calls/s of the {rate:,.0f} asked (median): it fell behind the pace"
            )
    return notes


# Request streams (client100, bidi100): server CPU per stream under the Go
# loadgen at least this many times lower than the grpcio counterpart's.
STREAM_CPU_VS_GRPCIO = 5.0
# The default transport's rows (h2: what users get) and grpc-go's
# transport's, which stays selectable.
STREAM_TARGET_SERVERS = (
    ("native_sync_h2", BASELINE),
    ("native_sync16_h2", BASELINE),
    ("native_aio_h2", AIO_BASELINE),
    ("native_aio_uvloop_h2", AIO_BASELINE),
    ("native_sync", BASELINE),
    ("native_aio", AIO_BASELINE),
    ("native_aio_uvloop", AIO_BASELINE),
)


def stream_targets(rows: list[dict], names: dict) -> list[tuple[str, Optional[bool], str]]:
    """The request-streaming workloads' targets: server() and aio.server()
    at least STREAM_CPU_VS_GRPCIO x cheaper per stream than grpc.server() /
    grpc.aio.server() under the Go loadgen; each number also as a multiple
    of grpc-go alone's (G) when the grpcgo row was measured."""
    out: list = []
    for workload in STREAM_WORKLOADS:
        go = _median(_row(rows, GRPCGO, workload=workload), "server_cpu_us_per_call")

        def g(us: float) -> str:
            return f"{us / go:.2f} G" if go else "G not measured"

        for server, base in STREAM_TARGET_SERVERS:
            label = (
                f"{names.get(server, server)} CPU per stream at least {STREAM_CPU_VS_GRPCIO:g}x lower than "
                f"{names.get(base, base)}'s ({workload}, Go loadgen)"
            )
            ours = _median(_row(rows, server, workload=workload), "server_cpu_us_per_call")
            theirs = _median(_row(rows, base, workload=workload), "server_cpu_us_per_call")
            if ours is None or theirs is None or ours <= 0:
                out.append((label, None, "not measured"))
                continue
            out.append(
                (
                    label,
                    theirs >= STREAM_CPU_VS_GRPCIO * ours,
                    f"{theirs / ours:.2f}x ({ours:,.1f} µs, {g(ours)}, vs {theirs:,.1f} µs, {g(theirs)})",
                )
            )
    return out


# --------------------------------------------------------------------------- the table


def section_table(rows: list[dict], names: dict, short: dict, tls: bool) -> str:
    base = TLS_BASELINE if tls else BASELINE
    aio = any(r["server"] in AIO_SERVERS for r in rows)
    ceiling = not tls and any(r["server"] == CEILING for r in rows)

    def calls(r):
        return harness.fmt_range(r["calls_per_s"], ",.0f")

    def latency(r):
        return f"{r['p50_us']['median']:,.0f} / {r['p99_us']['median']:,.0f}" if r["p50_us"] else "-"

    def of_ceiling(r):
        vs = r["vs"].get(CEILING)
        return f"{vs['calls']:.0%}" if vs and r["server"] != CEILING else "-"

    def errors(r):
        text = str(r["errors"])
        if r["failed_runs"]:
            text += f", {r['failed_runs']} failed runs"
        if r["unclean_exits"]:
            text += f", {r['unclean_exits']} unclean exits"
        return text

    columns = [
        ("Client", lambda r: short[r["client"]]),
        ("Server", lambda r: names[r["server"]]),
        ("calls/s, median (min–max)", calls),
        (f"vs {names[base]} (per-run range)", lambda r: harness.fmt_ratio(r["vs"].get(base))),
    ]
    if aio:
        columns.append(
            (
                "vs grpc.aio.server()",
                lambda r: harness.fmt_ratio(r["vs"].get(AIO_BASELINE)) if r["server"] in AIO_SERVERS else "-",
            )
        )
    if ceiling:
        columns.append(("of ceiling", of_ceiling))
    columns += [
        ("p50 / p99 µs", latency),
        ("server CPU, s per 1,000 calls", lambda r: harness.fmt_range(r["server_cpu_us_per_call"], ".4f", 1e-3)),
        (f"CPU per call vs {names[base]}", lambda r: harness.fmt_ratio(r["vs"].get(base), "cpu")),
        ("server peak RSS, MiB", lambda r: harness.fmt_range(r["server_rss_peak_mib"], ".0f", with_range=False)),
        ("other load, cores", lambda r: harness.fmt_range(r["other_cores"], ".2f", with_range=False)),
        ("errors", errors),
    ]
    lines = ["| " + " | ".join(c for c, _ in columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        cells = [f(r) if (r["calls_per_s"] or i < 2 or c == "errors") else "-" for i, (c, f) in enumerate(columns)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def sections(rows: list[dict], args) -> list[tuple[str, bool, list[dict]]]:
    """(title, tls, rows) per table, rows ordered by client then server as chosen."""
    out = []
    for tls in (False, True):
        for wk in args.workloads:
            rs = [r for r in rows if r["workload"] == wk and (r["server"] in TLS_SERVERS) == tls]
            rs.sort(key=lambda r: (args.clients.index(r["client"]), args.servers.index(r["server"])))
            if rs:
                title = ("TLS: " if tls else "") + WORKLOADS[wk].name
                out.append((title, tls, rs))
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    began = time.monotonic()
    machine = harness.machine_description()
    print(harness.describe(machine))

    with tempfile.TemporaryDirectory(prefix="pgn-bench-") as tmpdir:
        tmp = Path(tmpdir)
        why: dict = {}
        loadgen, why["loadgen"] = go_tool("loadgen", args.loadgen, any(k in LOADGEN_CLIENTS for k in args.clients), tmp)
        ceiling, why["ceiling"] = go_tool("ceiling", args.ceiling, any(k in CEILING_SERVERS for k in args.servers), tmp)
        goserver, why["goserver"] = go_tool("goserver", args.goserver, "grpcgo" in args.servers, tmp)
        tls = None
        if any(k in TLS_SERVERS for k in args.servers):
            from bench.tls import make_tls_files

            tls = make_tls_files(tmp)

        all_servers = server_kinds(args, ceiling, goserver, tls, why)
        all_clients = client_kinds(args, loadgen, tls)
        counterparts = {s.key: s.counterpart for s in all_servers.values() if s.counterpart}
        names = {k: s.name for k, s in all_servers.items()}
        names.update({k: c.name for k, c in all_clients.items()})
        names.update({k: w.name for k, w in WORKLOADS.items()})
        short_clients = {k: c.short or c.name for k, c in all_clients.items()}

        skipped: dict = {}
        servers = []
        for key in args.servers:
            s = all_servers[key]
            reason = s.available()
            if reason:
                skipped[key] = reason
                print(f"skipping {s.name}: {reason}")
            else:
                servers.append(s)
        clients = []
        for key in args.clients:
            if key in LOADGEN_CLIENTS and why["loadgen"]:
                skipped[key] = why["loadgen"]
                print(f"skipping {all_clients[key].name}: {why['loadgen']}")
            else:
                clients.append(all_clients[key])
        if not servers or not clients:
            print("nothing can run", file=sys.stderr)
            return 1
        cells = [
            Cell(s, c, WORKLOADS[w])
            for w in args.workloads
            for c in clients
            for s in servers
            if (not s.tls or w in TLS_WORKLOADS) and (c.workloads is None or w in c.workloads)
        ]
        if not cells:
            print(
                "no cells to measure (the TLS rows only run the workloads " + ", ".join(TLS_WORKLOADS)
                + "; the paced client only " + ", ".join(PACED_WORKLOADS) + ")"
            )  # fmt: skip
            return 1
        settings = (
            f"{args.runs} run(s) x {args.duration:g} s measured (+{args.warmup:g} s warmup) per cell"
            + (" (--quick)" if args.quick else "")
            + f"; {len(cells)} cells, {len(cells) * args.runs} measurements; "
            f"server()s with ThreadPoolExecutor(max_workers={args.grpcio_workers}); "
            f"low-level API with {args.lowlevel_threads} recv_batch thread(s); "
            f"Go loadgen {args.conns} connections x {args.concurrency} calls in flight"
            + (
                f", paced {PACED_CONNS} x {PACED_CALLERS} at {args.paced_rate:,.0f} calls/s"
                if PACED in args.clients
                else ""
            )
        )
        print(settings)
        print(f"{machine['cpus_usable']} CPUs shared by the server and the client processes\n", flush=True)
        changes: list = []
        records = harness.run_matrix(cells, args.runs, args.duration, args.warmup, changes=changes)

    rows = harness.summarize(records)
    for row in rows:
        for base in (BASELINE, AIO_BASELINE, CEILING, TLS_BASELINE, counterparts.get(row["server"])):
            if base:
                harness.add_ratio(rows, records, row, base)
    targets = check_targets(rows, records, names, counterparts)
    secs = sections(rows, args)

    target_lines = []
    for label, met, text in targets:
        verdict = "not measured" if met is None else ("met" if met else "NOT met")
        target_lines.append(f"- {label}: **{verdict}** — {text}" if met is not None else f"- {label}: {text}")
    notes = [f"- **WARNING**: {c}" for c in changes]
    for key, reason in skipped.items():
        notes.append(f"- {names[key]} skipped: {reason}")
    notes += paced_shortfalls(rows, all_clients, names)
    for r in records:
        if not r["ok"]:
            notes.append(
                f"- run {r['run'] + 1}, {names[r['server']]}, {names[r['client']]}, {names[r['workload']]} failed: "
                + (r.get("failure") or "no successful calls").splitlines()[0]
            )

    run_stamp = harness.stamp()
    png_name = f"compare-{run_stamp}.png"
    md = [
        "## pygrpc-native vs grpcio (`python -m bench.compare" + "".join(f" {a}" for a in (argv or sys.argv[1:])) + "`)",
        "",
        "```",
        harness.describe(machine),
        "```",
        "",
        settings + ".",
        "",
        "Clients: " + "; ".join(f"*{short_clients[c.key]}*: {c.name}" for c in clients) + ". "
        "Server and client share the CPUs above; *other load* is the CPU used by everything else on the "
        "machine during the window (noise). Ratios are medians over medians; in brackets, the range of "
        "run-by-run ratios. Streaming (server, client or bidi): calls/s counts whole streams of 100 "
        "messages, the latency runs to the end of the stream, and server CPU per call is per stream.",
        "",
        "### Targets (issues 7, 14, 23 and 24)",
        "",
        *target_lines,
    ]
    for title, tls_rows, rs in secs:
        md += ["", f"### {title}", "", section_table(rs, names, short_clients, tls_rows)]
    if notes:
        md += ["", "### Notes", "", *notes]
    markdown = "\n".join(md)
    print()
    print(markdown)

    if not args.no_save:
        harness.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        base = harness.RESULTS_DIR / f"compare-{run_stamp}"
        Path(f"{base}.md").write_text(markdown + ("\n\n![chart](" + png_name + ")\n" if not args.no_chart else "\n"))
        import json

        Path(f"{base}.json").write_text(
            json.dumps(
                {
                    "benchmark": "compare",
                    "machine": machine,
                    "settings": {k: v for k, v in vars(args).items()},
                    "skipped": skipped,
                    "targets": [{"target": t, "met": m, "value": v} for t, m, v in targets],
                    "rows": rows,
                    "records": records,
                },
                indent=1,
            )
            + "\n"
        )
        written = [f"{base}.md", f"{base}.json"]
        if not args.no_chart:
            from bench import chart

            problem = chart.draw(
                Path(f"{base}.png"),
                [(title, rs) for title, _, rs in secs],
                {k: s.name for k, s in all_servers.items()},
                short_clients,
                "pygrpc-native vs grpcio: " + settings.split(";")[0],
                f"{machine['cpu_model']}, {machine['cpus_usable']} CPUs; {machine['python']}; grpcio {machine['grpcio']}",
            )
            if problem:
                print(problem)
            else:
                written.append(f"{base}.png")
        print("\nwrote " + ", ".join(str(Path(w).relative_to(harness.REPO_ROOT)) for w in written))
    print(f"took {harness._fmt_eta(time.monotonic() - began)}")
    failed = sum(1 for r in records if not r["ok"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
