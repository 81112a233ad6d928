"""One grpcio client thread making blocking unary calls in a loop.

Prints the same JSON object as the Go loadgen (see bench/clients/__init__.py).
"""

import argparse
import json
import math
import sys
import time

import grpc

from bench.servers._common import check_loopback


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--addr", required=True, help="host:port (loopback only)")
    p.add_argument("--method", default="/echo.Echo/Say")
    p.add_argument("--payload", type=int, default=0, help="request size in bytes")
    p.add_argument("--duration", type=float, default=5.0, help="measured window, seconds")
    p.add_argument("--warmup", type=float, default=1.0, help="warmup, seconds (not counted)")
    p.add_argument("--timeout", type=float, default=10.0, help="per-call deadline, seconds")
    p.add_argument("--sync", action="store_true", help="print MEASURE_START / MEASURE_END")
    args = p.parse_args()
    check_loopback(args.addr.rsplit(":", 1)[0].strip("[]"))

    request = bytes(i & 0xFF for i in range(args.payload))
    calls = bad = 0
    errors: dict[str, int] = {}
    latencies_ns: list[int] = []
    with grpc.insecure_channel(args.addr) as channel:
        grpc.channel_ready_future(channel).result(timeout=10.0)
        say = channel.unary_unary(args.method)  # no serializers: bytes in, bytes out
        clock = time.perf_counter_ns

        end = time.monotonic() + args.warmup
        warmup_calls = 0
        while time.monotonic() < end:
            try:
                say(request, timeout=args.timeout)
            except grpc.RpcError:
                pass
            warmup_calls += 1

        if args.sync:
            print("MEASURE_START", flush=True)
        start = time.monotonic()
        end = start + args.duration
        while True:
            t0 = clock()
            try:
                response = say(request, timeout=args.timeout)
            except grpc.RpcError as e:
                name = e.code().name if e.code() is not None else "UNKNOWN"
                errors[name] = errors.get(name, 0) + 1
            else:
                if response == request:
                    calls += 1
                    latencies_ns.append(clock() - t0)
                else:
                    bad += 1
            if time.monotonic() >= end:
                break
        elapsed = time.monotonic() - start
        if args.sync:
            print("MEASURE_END", flush=True)

    latencies_ns.sort()

    def pct(q: float) -> float:
        if not latencies_ns:
            return 0.0
        i = min(len(latencies_ns) - 1, max(0, math.ceil(q * len(latencies_ns)) - 1))
        return latencies_ns[i] / 1000.0

    json.dump(
        {
            "calls": calls,
            "errors": sum(errors.values()),
            "errors_by_code": errors,
            "bad_responses": bad,
            "calls_per_s": calls / elapsed,
            "p50_us": pct(0.50),
            "p99_us": pct(0.99),
            "duration_s": elapsed,
            "warmup_calls": warmup_calls,
            "threads": 1,
            "payload_bytes": args.payload,
            "method": args.method,
        },
        sys.stdout,
    )
    print(flush=True)


if __name__ == "__main__":
    main()
