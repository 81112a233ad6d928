"""Calls of any of the four kinds, started without waiting (``start``), and a
burst of them made from another process (``burst``, run in a
multiprocessing pool of the spawn kind: this module imports only grpcio).

Method kinds are grpcio's handler fields: ``unary_unary``,
``unary_stream``, ``stream_unary``, ``stream_stream``. A request stream
sends ``REQUESTS`` and ends.
"""

from __future__ import annotations

import time
from concurrent import futures
from typing import Any, List, Optional, Tuple

import grpc

METHOD_KINDS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
REQUESTS = (b"r1", b"r2")


def start(channel: grpc.Channel, kind: str, path: str, timeout: Optional[float], request: bytes = b"req") -> Any:
    """Starts one call of kind (request: a unary request's message); a call
    object (grpcio's rendezvous) whose code() waits for its end and whose
    cancel() cancels it."""
    if kind == "unary_unary":
        return channel.unary_unary(path).future(request, timeout=timeout)
    if kind == "unary_stream":
        return channel.unary_stream(path)(request, timeout=timeout)
    if kind == "stream_unary":
        return channel.stream_unary(path).future(iter(REQUESTS), timeout=timeout)
    if kind == "stream_stream":
        return channel.stream_stream(path)(iter(REQUESTS), timeout=timeout)
    raise ValueError(kind)


def ended(call: Any, kind: str) -> Tuple[str, str]:
    """(status code name, details) once call has ended; a response stream is
    read to its end first."""
    if kind in ("unary_stream", "stream_stream"):
        try:
            for _ in call:
                pass
        except grpc.RpcError:
            pass
    else:
        try:
            call.result()
        except (grpc.RpcError, grpc.FutureCancelledError):
            pass
    return call.code().name, call.details() or ""


def burst(target: str, kind: str, path: str, calls: int, at: float, timeout: float) -> List[Tuple[str, str]]:
    """From a process of its own: a channel to target, then, at time.time()
    == at, calls calls of kind to path at once; how each ended."""
    with grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        time.sleep(max(0.0, at - time.time()))
        started = [start(channel, kind, path, timeout) for _ in range(calls)]
        with futures.ThreadPoolExecutor(calls) as pool:
            return list(pool.map(lambda call: ended(call, kind), started))
