"""Bidi echo through pygrpc_native.server()'s grpcio fallback against the
same grpcio server called directly (issue 4: at least 0.7x).

    python -m bench.fallback [--streams 8] [--messages 2000] [--runs 5]

Each server runs in its own process (spawned), the client in this one:
``--streams`` concurrent bidi streams, each sending ``--messages`` small
messages and reading every echo. Reports messages per second, the median of
``--runs`` runs per server, and the ratio.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import threading
import time
from concurrent import futures

import grpc

_PATH = "/bench.Fallback/Echo"


def _echo(requests, context):
    for message in requests:
        yield message


def _serve(kind: str, port_queue, stop_event) -> None:
    if kind == "native":
        import pygrpc_native

        make = pygrpc_native.server
    else:
        make = grpc.server
    server = make(futures.ThreadPoolExecutor(16))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Fallback", {"Echo": grpc.stream_stream_rpc_method_handler(_echo)}),)
    )
    port_queue.put(server.add_insecure_port("127.0.0.1:0"))
    server.start()
    stop_event.wait(600)
    server.stop(None)


def _measure(port: int, streams: int, messages: int) -> float:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=10)
    call = channel.stream_stream(_PATH)
    payload = b"x" * 64
    counts = [0] * streams

    def one(i: int) -> None:
        for _ in call(iter([payload] * messages), timeout=120):
            counts[i] += 1

    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - started
    channel.close()
    assert sum(counts) == streams * messages, counts
    return sum(counts) / took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--messages", type=int, default=2000)
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    ctx = multiprocessing.get_context("spawn")
    rates = {}
    for kind in ("grpcio", "native"):
        port_queue, stop = ctx.Queue(), ctx.Event()
        proc = ctx.Process(target=_serve, args=(kind, port_queue, stop), daemon=True)
        proc.start()
        port = port_queue.get(timeout=60)
        try:
            _measure(port, args.streams, args.messages // 10)  # warm-up
            rates[kind] = [_measure(port, args.streams, args.messages) for _ in range(args.runs)]
        finally:
            stop.set()
            proc.join(30)
    ref, ours = statistics.median(rates["grpcio"]), statistics.median(rates["native"])
    print(f"bidi echo, {args.streams} streams x {args.messages} messages, median of {args.runs} runs")
    print(f"| server | messages/s (min-max) |\n|---|---|")
    print(f"| grpc.server(), called directly | {ref:,.0f} ({min(rates['grpcio']):,.0f}-{max(rates['grpcio']):,.0f}) |")
    print(f"| pygrpc_native.server(), through the fallback | {ours:,.0f} ({min(rates['native']):,.0f}-{max(rates['native']):,.0f}) |")
    print(f"ratio: {ours / ref:.2f}x (target >= 0.7x)")


if __name__ == "__main__":
    main()
