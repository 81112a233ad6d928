"""Server CPU per MiB of large response messages read by a grpcio client.

    python -m bench.probes.large_messages [grpcio,native] [--reps 7] [--sizes 3072:300,...]

Starts each server in a process of its own (grpc.server() or
pygrpc_native.server(), 4 workers, no size limits), streams N messages of
each size to one grpcio client in this process, and prints the median
throughput and the server's CPU time per MiB (os.times() in the server, read
through a unary call before and after each stream). A Python client reads
slower than the server writes, so the server's socket fills and what the
kernel can't take waits in the transport: the path this measures.
PGN_TRANSPORT picks pygrpc_native's transport, as everywhere.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from concurrent import futures

import grpc

SIZES = "3072:300,1024:600,64:8000,8:30000"  # KiB:messages per stream
_NO_LIMITS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


def serve(kind: str) -> None:
    """The server process: prints its port, then serves until killed."""
    if kind == "grpcio":
        make = grpc.server
    else:
        import pygrpc_native

        make = pygrpc_native.server
    messages: dict = {}

    def stream(request: bytes, context: grpc.ServicerContext):
        size, n = map(int, request.split(b","))
        message = messages.setdefault(size, b"x" * size)
        for _ in range(n):
            yield message

    def cpu(request: bytes, context: grpc.ServicerContext) -> bytes:
        t = os.times()
        return repr(t.user + t.system).encode()

    server = make(futures.ThreadPoolExecutor(4), options=_NO_LIMITS)
    handlers = {"S": grpc.unary_stream_rpc_method_handler(stream), "C": grpc.unary_unary_rpc_method_handler(cpu)}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("probe", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def measure(kind: str, size: int, n: int, reps: int) -> tuple:
    """(MiB/s, server CPU ms per MiB), medians of reps streams."""
    proc = subprocess.Popen([sys.executable, "-m", "bench.probes.large_messages", "--serve", kind], stdout=subprocess.PIPE)
    try:
        port = int(proc.stdout.readline())  # type: ignore[union-attr]
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", -1)]) as ch:
            stream, cpu = ch.unary_stream("/probe/S"), ch.unary_unary("/probe/C")
            request = f"{size},{n}".encode()
            for _ in range(2):  # warm up
                sum(1 for _ in stream(request))
            walls, cpus = [], []
            for _ in range(reps):
                before = float(cpu(b""))
                start = time.perf_counter()
                if sum(1 for _ in stream(request)) != n:
                    raise RuntimeError("the stream ended early")
                walls.append(time.perf_counter() - start)
                cpus.append(float(cpu(b"")) - before)
    finally:
        proc.kill()
        proc.wait()
    mib = size * n / 2**20
    return mib / statistics.median(walls), statistics.median(cpus) / mib * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("servers", nargs="?", default="grpcio,native", help="comma-separated: grpcio, native")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--sizes", default=SIZES, help=f"KiB:messages per stream, comma-separated (default {SIZES})")
    p.add_argument("--serve", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.serve)
        return
    transport = os.environ.get("PGN_TRANSPORT") or "h2"
    print("| message | server | MiB/s | server CPU, ms per MiB |")
    print("|---|---|---|---|")
    for item in args.sizes.split(","):
        kib, n = map(int, item.split(":"))
        size = kib << 10
        for kind in args.servers.split(","):
            rate, cpu_ms = measure(kind, size, n, args.reps)
            name = "grpc.server()" if kind == "grpcio" else f"server(), {transport}"
            print(f"| {size >> 10:,} KiB x {n:,} | {name} | {rate:,.0f} | {cpu_ms:.2f} |", flush=True)


if __name__ == "__main__":
    main()
