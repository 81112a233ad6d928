"""The reliability probes' server: one servicer, served by any of four
kinds, in a process of its own so that its memory and threads can be
measured and a crash can't take the prober with it.

    python serve.py KIND [WORKERS]

KIND is ``server`` (pygrpc_native.server()), ``aio``
(pygrpc_native.aio.server()), ``lowlevel`` (NativeGrpcFront with serving
threads), or a control: ``grpc`` (grpc.server()) or ``grpc_aio``
(grpc.aio.server()). It prints ``PORT <n>``
once serving and stops (grace 1 s) on SIGTERM or when stdin closes. With
PGN_REL_TLS_DIR set (a directory with server.key, server.pem and ca.pem),
it serves mutual TLS instead of plaintext (not for lowlevel); with
PGN_REL_MAX_RPCS, that maximum_concurrent_rpcs (not for lowlevel). Ours
run on the transport PGN_TRANSPORT names (the package reads it; unset:
the default).

Methods (raw bytes, no protobuf):

* ``/rel.R/Say`` unary: the request decides, by prefix:
  ``sleep:<ms>`` sleeps then echoes, ``block`` waits until the call is no
  longer active, ``raise`` raises ValueError, ``wrongtype`` returns a str,
  anything else is echoed. ``cb`` anywhere in it registers a callback
  (add_callback / add_done_callback) that counts when it fires (and, if
  accepted, counts as registered).
* ``/rel.R/Count`` server-streaming: request ``<n>:<size>`` answers n
  messages of size bytes; ``raise`` raises after the first message.
* ``/rel.R/Bidi`` bidi: echoes each message.
* ``/rel.R/Stats`` unary: JSON with rss_kib, rss_peak_kib, threads (OS
  threads), cpu_s (the process's CPU time), the
  front's metrics() (None for grpc), handlers (Say handlers started),
  callbacks_registered and callbacks_fired.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import sys
import threading
import time
from concurrent import futures
from typing import Any, Callable, Dict, Iterator, Optional

import grpc

SERVICE = "rel.R"


class Counters:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values = {"handlers": 0, "callbacks_registered": 0, "callbacks_fired": 0}

    def add(self, key: str) -> None:
        with self.lock:
            self.values[key] += 1


COUNTERS = Counters()
FRONT: Optional[Any] = None  # the NativeGrpcFront whose metrics Stats reports


def process_stats() -> Dict[str, Any]:
    """This process's resident memory and OS thread count (Linux /proc)."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out: Dict[str, Any] = {
        "rss_kib": int(fields["VmRSS"][0]),
        "rss_peak_kib": int(fields["VmHWM"][0]),  # the high-water mark: catches memory held only briefly
        "threads": int(fields["Threads"][0]),
        "cpu_s": usage.ru_utime + usage.ru_stime,
    }
    out["metrics"] = FRONT.metrics() if FRONT is not None else None
    with COUNTERS.lock:
        out.update(COUNTERS.values)
    return out


def add_port(server: Any, kind: str) -> int:
    """Plaintext, or mutual TLS when PGN_REL_TLS_DIR is set."""
    tls_dir = os.environ.get("PGN_REL_TLS_DIR")
    if not tls_dir:
        return server.add_insecure_port("127.0.0.1:0")
    read = {name: open(os.path.join(tls_dir, name), "rb").read() for name in ("server.key", "server.pem", "ca.pem")}
    if kind.startswith("grpc"):
        make = grpc.ssl_server_credentials
    else:
        import pygrpc_native

        make = pygrpc_native.ssl_server_credentials
    creds = make([(read["server.key"], read["server.pem"])], root_certificates=read["ca.pem"], require_client_auth=True)
    return server.add_secure_port("127.0.0.1:0", creds)


def stats_bytes() -> bytes:
    return json.dumps(process_stats()).encode()


def count_plan(request: bytes) -> tuple[int, int]:
    n, _, size = request.partition(b":")
    return int(n), int(size or b"1")


# -- grpc.server() / pygrpc_native.server() ----------------------------------


def say(request: bytes, context: grpc.ServicerContext) -> Any:
    COUNTERS.add("handlers")
    # add_callback refuses (False) once the call has ended; only an
    # accepted callback must fire.
    if b"cb" in request and context.add_callback(lambda: COUNTERS.add("callbacks_fired")):
        COUNTERS.add("callbacks_registered")
    if request.startswith(b"sleep:"):
        time.sleep(int(request[6:].split(b"/")[0]) / 1000)
    elif request.startswith(b"block"):
        while context.is_active():
            time.sleep(0.01)
    elif request.startswith(b"raise"):
        raise ValueError("the handler failed on purpose")
    elif request.startswith(b"wrongtype"):
        return "not bytes"
    return request


def count(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
    if request.startswith(b"raise"):
        yield b"first"
        raise ValueError("the stream failed on purpose")
    n, size = count_plan(request)
    body = b"x" * size
    for _ in range(n):
        yield body


def bidi(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
    yield from requests


def stats(request: bytes, context: grpc.ServicerContext) -> bytes:
    return stats_bytes()


def sync_handler() -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Say": grpc.unary_unary_rpc_method_handler(say),
            "Count": grpc.unary_stream_rpc_method_handler(count),
            "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
            "Stats": grpc.unary_unary_rpc_method_handler(stats),
        },
    )


def max_rpcs() -> Optional[int]:
    """maximum_concurrent_rpcs from PGN_REL_MAX_RPCS (unset: none)."""
    value = os.environ.get("PGN_REL_MAX_RPCS")
    return int(value) if value else None


def run_sync(kind: str, workers: int, stop: threading.Event) -> None:
    global FRONT
    if kind == "grpc":
        server = grpc.server(futures.ThreadPoolExecutor(workers), maximum_concurrent_rpcs=max_rpcs())
    else:
        import pygrpc_native

        server = pygrpc_native.server(futures.ThreadPoolExecutor(workers), maximum_concurrent_rpcs=max_rpcs())
        FRONT = server._server.front  # the handle's server (pygrpc_native._handle)
    server.add_generic_rpc_handlers((sync_handler(),))
    port = add_port(server, kind)
    server.start()
    print(f"PORT {port}", flush=True)
    stop.wait()
    server.stop(1).wait(30)


# -- pygrpc_native.aio.server() ----------------------------------------------


async def aio_say(request: bytes, context: Any) -> Any:
    COUNTERS.add("handlers")
    if b"cb" in request:
        COUNTERS.add("callbacks_registered")
        context.add_done_callback(lambda _ctx: COUNTERS.add("callbacks_fired"))
    if request.startswith(b"sleep:"):
        await asyncio.sleep(int(request[6:].split(b"/")[0]) / 1000)
    elif request.startswith(b"block"):
        while not context.done():
            await asyncio.sleep(0.01)
    elif request.startswith(b"raise"):
        raise ValueError("the handler failed on purpose")
    elif request.startswith(b"wrongtype"):
        return "not bytes"
    return request


async def aio_count(request: bytes, context: Any) -> Any:
    if request.startswith(b"raise"):
        yield b"first"
        raise ValueError("the stream failed on purpose")
    n, size = count_plan(request)
    body = b"x" * size
    for _ in range(n):
        yield body


async def aio_bidi(requests: Any, context: Any) -> Any:
    async for message in requests:
        yield message


async def aio_stats(request: bytes, context: Any) -> bytes:
    return stats_bytes()


async def run_aio(kind: str, stop: threading.Event) -> None:
    global FRONT
    if kind == "grpc_aio":
        server = grpc.aio.server(maximum_concurrent_rpcs=max_rpcs())
    else:
        import pygrpc_native.aio

        server = pygrpc_native.aio.server(maximum_concurrent_rpcs=max_rpcs())
        FRONT = server._server.front  # the handle's server (pygrpc_native._handle)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                SERVICE,
                {
                    "Say": grpc.unary_unary_rpc_method_handler(aio_say),
                    "Count": grpc.unary_stream_rpc_method_handler(aio_count),
                    "Bidi": grpc.stream_stream_rpc_method_handler(aio_bidi),
                    "Stats": grpc.unary_unary_rpc_method_handler(aio_stats),
                },
            ),
        )
    )
    port = add_port(server, kind)
    await server.start()
    print(f"PORT {port}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, stop.wait)
    await server.stop(1)


# -- NativeGrpcFront ---------------------------------------------------------


def run_lowlevel(workers: int, stop: threading.Event) -> None:
    global FRONT
    from pygrpc_native import EVENT_CALL, NativeGrpcFront

    paths = [(f"/{SERVICE}/Say", False), (f"/{SERVICE}/Count", True), (f"/{SERVICE}/Stats", False)]
    front = NativeGrpcFront("127.0.0.1:0", paths)
    FRONT = front
    unknown = grpc.StatusCode.UNKNOWN.value[0]

    def handle(call_id: int, method_id: int, payload: bytes) -> None:
        if method_id == 0:
            COUNTERS.add("handlers")
            if payload.startswith(b"sleep:"):
                time.sleep(int(payload[6:].split(b"/")[0]) / 1000)
            if payload.startswith(b"raise"):
                front.finish(call_id, unknown, "the handler failed on purpose")
            else:
                front.respond(call_id, payload)
        elif method_id == 1:
            n, size = count_plan(payload)
            body = b"x" * size
            for _ in range(n):
                if not front.send_message(call_id, body):
                    return
            front.finish(call_id, 0)
        else:
            front.respond(call_id, stats_bytes())

    def serve() -> None:
        while True:
            events = front.recv_batch(64, 0.5)
            if events is None:
                return
            for kind, call_id, method_id, payload, _key in events:
                if kind == EVENT_CALL:
                    try:
                        handle(call_id, method_id, payload)
                    except RuntimeError:
                        if not stop.is_set():
                            raise
                        return  # stopped between the event and the answer

    front.start()
    threads = [threading.Thread(target=serve, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    print(f"PORT {front.port}", flush=True)
    stop.wait()
    front.stop(1)
    for t in threads:
        t.join(10)


def main() -> None:
    # Thousands of idle connections need as many descriptors (Go raises its
    # own limit; grpcio's servers need it done).
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    kind = sys.argv[1]
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    runners: Dict[str, Callable[[], None]] = {
        "grpc": lambda: run_sync(kind, workers, stop),
        "server": lambda: run_sync(kind, workers, stop),
        "aio": lambda: asyncio.run(run_aio(kind, stop)),
        "grpc_aio": lambda: asyncio.run(run_aio(kind, stop)),
        "lowlevel": lambda: run_lowlevel(min(workers, 4), stop),
    }
    runners[kind]()
    os._exit(0)  # what the probes check has been reported; skip slow teardown


if __name__ == "__main__":
    main()
