"""grpcio client threads making blocking calls in a loop, in one process or
several (--procs P --threads T: P processes of T threads each, all on one
measured window; the spec's 32 threads are --procs 8 --threads 4).

Unary echo calls by default; with --stream-messages N, server-streaming calls
to /echo.Echo/Count that must bring the --payload body back N times; with
--client-messages N, client-streaming calls to /echo.Echo/Collect (a request
generator of N bodies; the response must be the body); with --pingpong N,
bidi calls to /echo.Echo/Chat (N times: send the body, wait for its echo;
then half-close, and nothing more may come). A stream counts as one call. Each
process has one channel, shared by its threads. --ca (with --server-name)
connects with TLS.

Prints the same JSON object as the Go loadgen (see bench/clients/__init__.py).
With more than one process, the processes this one starts (``--worker``)
connect, say READY, get the window's start and end (CLOCK_MONOTONIC, which
all processes share) on stdin, and report their counts and latencies back.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time

import grpc

from bench.servers._common import CHAT_METHOD, COLLECT_METHOD, COUNT_METHOD, ECHO_METHOD, check_loopback, count_request

READY_TIMEOUT_S = 60.0
RESULT_SLACK_S = 30.0


def _channel(args) -> grpc.Channel:
    if not args.ca:
        return grpc.insecure_channel(args.addr)
    with open(args.ca, "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    options = [("grpc.ssl_target_name_override", args.server_name)] if args.server_name else []
    return grpc.secure_channel(args.addr, creds, options=options)


class Counts:
    def __init__(self) -> None:
        self.calls = 0
        self.bad = 0
        self.errors: dict[str, int] = {}
        self.latencies_us: list[int] = []
        self.warmup_calls = 0

    def merge(self, other: dict) -> None:
        self.calls += other["calls"]
        self.bad += other["bad_responses"]
        self.warmup_calls += other["warmup_calls"]
        for k, v in other["errors_by_code"].items():
            self.errors[k] = self.errors.get(k, 0) + v
        self.latencies_us.extend(other["latencies_us"])


def _caller(channel: grpc.Channel, args):
    """A function making one call and returning True if the response is right."""
    body = bytes(i & 0xFF for i in range(args.payload))
    if args.stream_messages:
        method = channel.unary_stream(args.method or COUNT_METHOD)  # raw bytes both ways
        request, n = count_request(args.stream_messages, body), args.stream_messages

        def call() -> bool:
            got, ok = 0, True
            for message in method(request, timeout=args.timeout):
                got += 1
                ok = ok and message == body
            return ok and got == n

    elif args.client_messages:
        method = channel.stream_unary(args.method or COLLECT_METHOD)
        n = args.client_messages

        def call() -> bool:
            return method((body for _ in range(n)), timeout=args.timeout) == body

    elif args.pingpong:
        method = channel.stream_stream(args.method or CHAT_METHOD)
        n = args.pingpong

        def call() -> bool:
            turn = threading.Semaphore(0)  # released by each echo: the next message may go
            over = []  # set when the responses end: the generator stops waiting

            def requests():
                # grpcio sends from its own thread; each message waits for the
                # previous one's echo, and the half-close for the last echo.
                for i in range(n + 1):
                    if i and (not turn.acquire(timeout=args.timeout) or over):
                        return
                    if i < n:
                        yield body

            got, ok = 0, True
            try:
                for message in method(requests(), timeout=args.timeout):
                    got += 1
                    ok = ok and message == body
                    turn.release()
            finally:
                over.append(True)
                turn.release()
            return ok and got == n

    else:
        method = channel.unary_unary(args.method or ECHO_METHOD)

        def call() -> bool:
            return method(body, timeout=args.timeout) == body

    return call


def _thread(call, start_ns: int, end_ns: int, out: Counts, lock: threading.Lock) -> None:
    mine = Counts()
    clock = time.monotonic_ns
    while True:
        t0 = clock()
        try:
            ok = call()
            code = None
        except grpc.RpcError as e:
            ok = False
            code = e.code().name if e.code() is not None else "UNKNOWN"
        t1 = clock()
        if t1 >= end_ns:
            break  # finished after the window closed: not counted
        if t1 < start_ns:
            mine.warmup_calls += 1
            continue
        if code is not None:
            mine.errors[code] = mine.errors.get(code, 0) + 1
        elif ok:
            mine.calls += 1
            mine.latencies_us.append((t1 - t0) // 1000)
        else:
            mine.bad += 1
    with lock:
        out.merge(
            {
                "calls": mine.calls,
                "bad_responses": mine.bad,
                "warmup_calls": mine.warmup_calls,
                "errors_by_code": mine.errors,
                "latencies_us": mine.latencies_us,
            }
        )


def _run_threads(call, threads: int, start_ns: int, end_ns: int) -> Counts:
    out, lock = Counts(), threading.Lock()
    ts = [
        threading.Thread(target=_thread, args=(call, start_ns, end_ns, out, lock), daemon=True)
        for _ in range(threads)
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def _sleep_until(t_ns: int) -> None:
    while (left := t_ns - time.monotonic_ns()) > 0:
        time.sleep(left / 1e9)


def _worker(args) -> None:
    """--worker: connect, say READY, read the window, run, report."""
    with _channel(args) as channel:
        grpc.channel_ready_future(channel).result(timeout=args.connect_timeout)
        call = _caller(channel, args)
        print("READY", flush=True)
        line = sys.stdin.readline().split()
        if len(line) != 3 or line[0] != "GO":
            sys.exit(f"worker: expected 'GO <start_ns> <end_ns>', got {line!r}")
        counts = _run_threads(call, args.threads, int(line[1]), int(line[2]))
    json.dump(
        {
            "calls": counts.calls,
            "bad_responses": counts.bad,
            "warmup_calls": counts.warmup_calls,
            "errors_by_code": counts.errors,
            "latencies_us": counts.latencies_us,
        },
        sys.stdout,
    )
    print(flush=True)


def _worker_argv(args) -> list:
    argv = [
        sys.executable, "-m", "bench.clients.grpcio_client", "--worker",
        "--addr", args.addr, "--payload", str(args.payload), "--threads", str(args.threads),
        "--stream-messages", str(args.stream_messages), "--client-messages", str(args.client_messages),
        "--pingpong", str(args.pingpong), "--timeout", str(args.timeout),
        "--connect-timeout", str(args.connect_timeout),
    ]  # fmt: skip
    if args.method:
        argv += ["--method", args.method]
    if args.ca:
        argv += ["--ca", args.ca]
    if args.server_name:
        argv += ["--server-name", args.server_name]
    return argv


def _mark(args, text: str) -> None:
    if args.sync:
        print(text, flush=True)


def _window(args) -> tuple[int, int]:
    start = time.monotonic_ns() + int(args.warmup * 1e9)
    return start, start + int(args.duration * 1e9)


def _in_process(args) -> tuple[Counts, int, int]:
    with _channel(args) as channel:
        grpc.channel_ready_future(channel).result(timeout=args.connect_timeout)
        call = _caller(channel, args)
        start_ns, end_ns = _window(args)
        result: list = []
        runner = threading.Thread(
            target=lambda: result.append(_run_threads(call, args.threads, start_ns, end_ns)), daemon=True
        )
        runner.start()
        _sleep_until(start_ns)
        _mark(args, "MEASURE_START")
        _sleep_until(end_ns)
        _mark(args, "MEASURE_END")
        runner.join(args.timeout + RESULT_SLACK_S)
        if not result:
            sys.exit("client: threads did not finish after the window")
        return result[0], start_ns, end_ns


def _with_workers(args) -> tuple[Counts, int, int]:
    env = dict(os.environ)
    procs = [
        subprocess.Popen(_worker_argv(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(args.procs)
    ]
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        for p in procs:
            # readline() blocks; the worker's own connect timeout bounds it.
            line = p.stdout.readline().strip()
            if line != "READY":
                sys.exit(f"client: a worker did not get ready (said {line!r}, exit {p.poll()})")
            if time.monotonic() > deadline:
                sys.exit("client: workers too slow to get ready")
        start_ns, end_ns = _window(args)
        for p in procs:
            p.stdin.write(f"GO {start_ns} {end_ns}\n")
            p.stdin.flush()
        _sleep_until(start_ns)
        _mark(args, "MEASURE_START")
        _sleep_until(end_ns)
        _mark(args, "MEASURE_END")
        total = Counts()
        for p in procs:
            out, _ = p.communicate(timeout=args.timeout + RESULT_SLACK_S)
            lines = [x for x in out.splitlines() if x.startswith("{")]
            if p.returncode != 0 or not lines:
                sys.exit(f"client: a worker failed (exit {p.returncode})")
            total.merge(json.loads(lines[-1]))
        return total, start_ns, end_ns
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--addr", required=True, help="host:port (loopback only)")
    p.add_argument(
        "--method",
        help=f"method path (default {ECHO_METHOD}, or {COUNT_METHOD} with --stream-messages, "
        f"{COLLECT_METHOD} with --client-messages, {CHAT_METHOD} with --pingpong)",
    )
    p.add_argument("--payload", type=int, default=0, help="request size in bytes (streaming: each message's)")
    p.add_argument("--stream-messages", type=int, default=0, help="0: unary calls; N: server-streaming calls of N messages")
    p.add_argument(
        "--client-messages", type=int, default=0, help=f"N: client-streaming calls of N messages ({COLLECT_METHOD})"
    )
    p.add_argument("--pingpong", type=int, default=0, help=f"N: bidi calls of N ping-pong echoes ({CHAT_METHOD})")
    p.add_argument("--threads", type=int, default=1, help="client threads per process")
    p.add_argument("--procs", type=int, default=1, help="client processes (1: this one)")
    p.add_argument("--duration", type=float, default=5.0, help="measured window, seconds")
    p.add_argument("--warmup", type=float, default=1.0, help="warmup, seconds (not counted)")
    p.add_argument("--timeout", type=float, default=10.0, help="per-call deadline, seconds")
    p.add_argument("--connect-timeout", type=float, default=20.0, help="seconds to wait for the channel")
    p.add_argument("--ca", help="PEM CA certificates: connect with TLS")
    p.add_argument("--server-name", help="with --ca: the name the server certificate is checked against")
    p.add_argument("--sync", action="store_true", help="print MEASURE_START / MEASURE_END")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    check_loopback(args.addr.rsplit(":", 1)[0].strip("[]"))
    counts = (args.payload, args.stream_messages, args.client_messages, args.pingpong)
    if args.threads < 1 or args.procs < 1 or min(counts) < 0:
        p.error("--threads and --procs must be >= 1; --payload, --stream-messages, --client-messages, --pingpong >= 0")
    if sum(1 for n in (args.stream_messages, args.client_messages, args.pingpong) if n) > 1:
        p.error("at most one of --stream-messages, --client-messages and --pingpong")
    if args.worker:
        _worker(args)
        return

    counts, start_ns, end_ns = (_in_process if args.procs == 1 else _with_workers)(args)
    elapsed = (end_ns - start_ns) / 1e9
    lat = sorted(counts.latencies_us)

    def pct(q: float) -> float:
        if not lat:
            return 0.0
        return float(lat[min(len(lat) - 1, max(0, math.ceil(q * len(lat)) - 1))])

    json.dump(
        {
            "calls": counts.calls,
            "errors": sum(counts.errors.values()),
            "errors_by_code": counts.errors,
            "bad_responses": counts.bad,
            "calls_per_s": counts.calls / elapsed,
            "p50_us": pct(0.50),
            "p99_us": pct(0.99),
            "duration_s": elapsed,
            "warmup_calls": counts.warmup_calls,
            "procs": args.procs,
            "threads": args.threads,
            "payload_bytes": args.payload,
            "stream_messages": args.stream_messages,
            "client_messages": args.client_messages,
            "pingpong": args.pingpong,
            "tls": bool(args.ca),
        },
        sys.stdout,
    )
    print(flush=True)


if __name__ == "__main__":
    main()
