"""Low-level API echo server vs grpc.server(), same handler, two kinds of client.

    python -m bench.lowlevel            # 5 runs x 5 s per cell
    python -m bench.lowlevel --quick    # 1 run x 2 s, a smoke check

Servers: grpc.server() with a thread pool (the baseline), and NativeGrpcFront
with Python threads looping recv_batch/respond. Clients: one grpcio thread
making blocking calls, and the Go load generator (saturating). For each cell it
reports calls/s and server CPU per call (median and min–max), with ratios to
grpc.server() from the same run, and writes JSON and markdown to bench/results/.

Targets (the issue's): >= 5x grpc.server() calls/s under the saturating client,
>= 1.5x with one grpcio client thread.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bench import harness
from bench.harness import ClientKind, ServerKind, Workload

BASELINE = "grpcio_sync"
# Minimum calls/s ratio to grpc.server(), by client.
TARGETS = {"grpcio_1thread": 1.5, "loadgen": 5.0}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5, help="measurements per cell (default 5)")
    p.add_argument("--duration", type=float, default=5.0, help="measured seconds per run (default 5)")
    p.add_argument("--warmup", type=float, default=1.0, help="warmup seconds per run, not measured (default 1)")
    p.add_argument("--quick", action="store_true", help="smoke check: 1 run of 2 s")
    p.add_argument("--payload", type=int, default=0, help="request (and response) bytes (default 0)")
    p.add_argument(
        "--servers",
        default="grpcio_sync,native_sync,lowlevel",
        help="comma-separated, from: grpcio_sync, native_sync, grpcio_aio, native_aio, native_aio_uvloop, lowlevel, grpcgo, ceiling (a plain grpc-go echo server, the ceiling "
        "for this machine; not run by default)",
    )
    p.add_argument("--clients", default="grpcio_1thread,loadgen", help="comma-separated subset of: grpcio_1thread,loadgen")
    p.add_argument("--grpcio-workers", type=int, default=4, help="grpc.server() ThreadPoolExecutor max_workers (default 4)")
    p.add_argument("--lowlevel-threads", type=int, default=1, help="Python threads calling recv_batch (default 1)")
    p.add_argument("--conns", type=int, default=4, help="loadgen connections (default 4)")
    p.add_argument("--concurrency", type=int, default=32, help="loadgen calls in flight per connection (default 32)")
    p.add_argument("--loadgen", help="use this loadgen binary instead of building one")
    p.add_argument("--no-save", action="store_true", help="don't write bench/results/")
    args = p.parse_args(argv)
    if args.quick:
        args.runs, args.duration = 1, 2.0
    if args.runs < 1 or args.duration <= 0 or args.warmup < 0:
        p.error("--runs must be >= 1, --duration > 0, --warmup >= 0")

    server_keys = [k.strip() for k in args.servers.split(",")]
    client_keys = [c.strip() for c in args.clients.split(",")]
    for k in server_keys:
        if k not in ("grpcio_sync", "native_sync", "grpcio_aio", "native_aio", "native_aio_uvloop", "lowlevel", "grpcgo", "ceiling"):
            p.error(f"unknown server {k!r}")
    for k in client_keys:
        if k not in ("grpcio_1thread", "loadgen"):
            p.error(f"unknown client {k!r}")
    machine = harness.machine_description()
    print(harness.describe(machine))
    print(
        f"{machine['cpus_usable']} CPUs shared by the server and client processes; "
        f"{args.runs} run(s) x {args.duration:g} s (+{args.warmup:g} s warmup) per cell\n"
    )

    with tempfile.TemporaryDirectory(prefix="pgn-bench-") as tmp:
        loadgen = Path(args.loadgen) if args.loadgen else None
        if "loadgen" in client_keys and loadgen is None:
            print("building bench/loadgen ...", flush=True)
            loadgen = harness.go_build("loadgen", Path(tmp))
        goserver = ceiling = None
        if "grpcgo" in server_keys:
            print("building bench/goserver ...", flush=True)
            goserver = harness.go_build("goserver", Path(tmp))
        if "ceiling" in server_keys:
            print("building bench/ceiling ...", flush=True)
            ceiling = harness.go_build("ceiling", Path(tmp))

        all_servers = {
            "grpcio_sync": ServerKind(
                "grpcio_sync",
                "grpc.server()",
                (sys.executable, "-m", "bench.servers.grpcio_sync", "--workers", str(args.grpcio_workers)),
            ),
            "native_sync": ServerKind(
                "native_sync",
                "pygrpc_native.server()",
                (sys.executable, "-m", "bench.servers.grpcio_sync", "--impl", "native", "--workers", str(args.grpcio_workers)),
                requires="pygrpc_native",
            ),
            "grpcio_aio": ServerKind(
                "grpcio_aio",
                "grpc.aio.server()",
                (sys.executable, "-m", "bench.servers.aio_echo", "--impl", "grpcio"),
            ),
            "native_aio": ServerKind(
                "native_aio",
                "pygrpc_native.aio.server()",
                (sys.executable, "-m", "bench.servers.aio_echo", "--impl", "native"),
                requires="pygrpc_native",
            ),
            "native_aio_uvloop": ServerKind(
                "native_aio_uvloop",
                "pygrpc_native.aio.server() + uvloop",
                (sys.executable, "-m", "bench.servers.aio_echo", "--impl", "native", "--uvloop"),
                requires="pygrpc_native",
            ),
            "lowlevel": ServerKind(
                "lowlevel",
                "Low-level API",
                (sys.executable, "-m", "bench.servers.lowlevel", "--threads", str(args.lowlevel_threads)),
                requires="pygrpc_native",
            ),
            "grpcgo": ServerKind("grpcgo", "grpc-go alone", (str(goserver),)),
            "ceiling": ServerKind("ceiling", "Go front answering in Go (ceiling)", (str(ceiling),)),
        }
        servers, skipped = [], {}
        for key in server_keys:
            s = all_servers[key]
            why = s.available()
            if why:
                skipped[s.key] = why
                print(f"skipping {s.name}: {why}")
            else:
                servers.append(s)
        if not servers:
            print("no server can run", file=sys.stderr)
            return 1

        def py_client(addr: str, w: Workload, duration: float, warmup: float) -> list:
            return [
                sys.executable, "-m", "bench.clients.grpcio_unary", "--sync",
                "--addr", addr, "--method", w.method, "--payload", str(w.payload),
                "--duration", str(duration), "--warmup", str(warmup),
            ]  # fmt: skip

        def go_client(addr: str, w: Workload, duration: float, warmup: float) -> list:
            return [
                str(loadgen), "-sync", "-addr", addr, "-method", w.method, "-payload", str(w.payload),
                "-conns", str(args.conns), "-concurrency", str(args.concurrency),
                "-duration", f"{duration}s", "-warmup", f"{warmup}s",
            ]  # fmt: skip

        all_clients = {
            "grpcio_1thread": ClientKind("grpcio_1thread", "1 grpcio client thread", py_client),
            "loadgen": ClientKind(
                "loadgen",
                f"Go loadgen ({args.conns}x{args.concurrency} in flight)",
                go_client,
                saturating=True,
            ),
        }
        clients = [all_clients[k] for k in client_keys]
        if args.payload == 0:
            workloads = [Workload("empty", "empty unary echo")]
        else:
            workloads = [Workload(f"{args.payload}B", f"{args.payload} B unary echo", payload=args.payload)]

        records = harness.run_matrix(servers, clients, workloads, args.runs, args.duration, args.warmup)

    rows = harness.summarize(records, BASELINE)
    names = {s.key: s.name for s in all_servers.values()}
    names.update({c.key: c.name for c in clients})
    names.update({w.key: w.name for w in workloads})
    table = harness.markdown_table(rows, names, all_servers[BASELINE].name)

    verdicts = []
    for row in rows:
        target = TARGETS.get(row["client"])
        if row["server"] in (BASELINE, "grpcgo") or target is None or row["ratio_calls_per_s"] is None:
            continue
        ok = row["ratio_calls_per_s"] >= target
        verdicts.append(
            f"- {names[row['server']]} with {names[row['client']]}: {row['ratio_calls_per_s']:.2f}x "
            f"grpc.server() (target >= {target:g}x): {'met' if ok else 'NOT met'}"
        )
    for key, why in skipped.items():
        verdicts.append(f"- {names[key]} skipped: {why}")
    for r in records:
        if not r["ok"]:
            why = (r.get("failure") or "no successful calls").splitlines()[0]
            verdicts.append(
                f"- run {r['run'] + 1}, {names[r['server']]} with {names[r['client']]} failed: {why}"
            )

    settings = (
        f"{args.runs} run(s) x {args.duration:g} s measured (+{args.warmup:g} s warmup); "
        f"grpc.server() with ThreadPoolExecutor(max_workers={args.grpcio_workers}); "
        f"low-level API with {args.lowlevel_threads} recv_batch thread(s); "
        f"payload {args.payload} B"
    )
    md = "\n".join(
        [
            "## Low-level API vs grpc.server()",
            "",
            "```",
            harness.describe(machine),
            "```",
            "",
            settings + ". Server and client share the CPUs above.",
            "",
            table,
            "",
            *verdicts,
        ]
    )
    print()
    print(md)
    if not args.no_save:
        payload = {
            "benchmark": "lowlevel",
            "machine": machine,
            "settings": vars(args),
            "skipped": skipped,
            "rows": rows,
            "records": records,
        }
        jpath, mpath = harness.save_results("lowlevel", payload, md)
        print(f"\nwrote {jpath.relative_to(harness.REPO_ROOT)} and {mpath.relative_to(harness.REPO_ROOT)}")
    failed = sum(1 for r in records if not r["ok"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
