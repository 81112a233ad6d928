"""Request-stream scenarios: client-streaming (``stream_unary``) and bidi
(``stream_stream``) methods written once for both kinds.

A *body* is an async generator function ``body(requests, ctx, state)``
(requests an async iterator, as flavoured handlers get it; tests/diff/flavours.py).
``handler(flavour, kind, body)`` serves it as a method of that kind: a
bidi method sends each item the body yields, a client-streaming method
answers with the items joined by b"," (b"" when it yields none). So one
body describes the same scenario for both kinds, and the client sees the
same items either way.

``call(channel, kind, path, requests)`` makes one call of that kind with a
request iterator and gives the client's harness.Outcome.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

import grpc
import pytest

from diff import harness

KINDS = ("stream_unary", "stream_stream")
each_kind = pytest.mark.parametrize("kind", KINDS)


def handler(flavour: Any, kind: str, body: Callable, state: Optional[harness.State] = None, **kwargs: Any) -> grpc.RpcMethodHandler:
    """body served as a method of kind on flavour's servers (see above);
    body gets state as its third argument (None unless given)."""
    if kind == "stream_unary":

        async def stream_unary(requests: Any, ctx: Any) -> bytes:
            return b",".join([item async for item in body(requests, ctx, state)])

        return flavour.stream_unary(stream_unary, **kwargs)
    if kind == "stream_stream":

        async def stream_stream(requests: Any, ctx: Any) -> Any:
            async for item in body(requests, ctx, state):
                yield item

        return flavour.stream_stream(stream_stream, **kwargs)
    raise ValueError(kind)


def serving(flavour: Any, kind: str, bodies: dict, **kwargs: Any) -> Callable[[Any, harness.State], None]:
    """A setup serving {name: body} as methods of kind, each body given the run's state."""

    def setup(server: Any, state: harness.State) -> None:
        flavour.handlers({name: handler(flavour, kind, body, state, **kwargs) for name, body in bodies.items()})(server, state)

    return setup


def call(
    channel: grpc.Channel,
    kind: str,
    path: str,
    requests: Iterable[bytes],
    *,
    metadata: Optional[Sequence[Tuple[str, Any]]] = None,
    timeout: Optional[float] = harness.CALL_TIMEOUT,
    compression: Optional[grpc.Compression] = None,
) -> harness.Outcome:
    """One call of kind to path sending requests, as the client saw it; a
    bidi call's messages are those read before it ended."""
    if kind == "stream_unary":
        try:
            response, done = channel.stream_unary(path).with_call(
                iter(requests), metadata=metadata, timeout=timeout, compression=compression
            )
        except grpc.RpcError as err:
            return harness.outcome_of(err)
        return harness.outcome_of(done, (response,))
    stream_call = channel.stream_stream(path)(iter(requests), metadata=metadata, timeout=timeout, compression=compression)
    return harness.outcome_of(stream_call, harness.read_all(stream_call))


def start(channel: grpc.Channel, kind: str, path: str, requests: Iterable[bytes], timeout: Optional[float] = 10) -> Any:
    """Starts a call of kind without waiting for it; a future (client
    streaming) or the call (bidi), both of which can be cancelled."""
    if kind == "stream_unary":
        return channel.stream_unary(path).future(iter(requests), timeout=timeout)
    return channel.stream_stream(path)(iter(requests), timeout=timeout)


def finish(started: Any, kind: str, wait: float = harness.WAIT) -> Tuple[Any, ...]:
    """How a started call ended, as (code, details, responses)."""
    if kind == "stream_unary":
        try:
            response = started.result(timeout=wait)
            return grpc.StatusCode.OK, "", (response,)
        except grpc.FutureCancelledError:
            return grpc.StatusCode.CANCELLED, "cancelled future", ()
        except grpc.RpcError as err:
            return err.code(), err.details(), ()
    responses = harness.read_all(started)
    return started.code(), started.details(), tuple(responses)


def from_queue(outbox: Any, timeout: float = harness.WAIT) -> Iterator[bytes]:
    """Requests as a test puts them in outbox (a queue.Queue), until None:
    for ping-pong, each sent once the previous answer came."""
    while (item := outbox.get(timeout=timeout)) is not None:
        yield item


def ping_pong(channel: grpc.Channel, path: str, count: int) -> Tuple[List[bytes], List[bytes], Any]:
    """A bidi call that sends b"0", b"1", ... each once the answer to the
    previous came: (the answers, what came after the half-close, the code)."""
    outbox: Any = queue.Queue()
    call = channel.stream_stream(path)(from_queue(outbox), timeout=5)
    answers = []
    for i in range(count):
        outbox.put(b"%d" % i)
        answers.append(next(call))
    outbox.put(None)
    rest = list(call)
    return answers, rest, call.code()


def numbered(count: int, size: int = 0) -> List[bytes]:
    """count distinct requests: b"0", b"1", ... padded with b"." to size."""
    return [str(i).encode().ljust(size, b".") for i in range(count)]


def gated(
    first: Sequence[bytes],
    gate: threading.Event,
    rest: Sequence[bytes] = (),
    wait: float = harness.WAIT,
    timed_out: Optional[List[bool]] = None,
) -> Iterator[bytes]:
    """Yields first, then waits (bounded) for gate before yielding rest: a
    client still sending when the test acts on the call. Appends to
    timed_out, when given, whether the wait ran out before gate was set."""
    yield from first
    opened = gate.wait(wait)
    if timed_out is not None:
        timed_out.append(not opened)
    yield from rest


def endless(interval: float, limit: float = harness.WAIT, size: int = 0, sent: Optional[List[int]] = None) -> Iterator[bytes]:
    """Numbered requests every interval seconds for up to limit seconds: a
    client that keeps sending until the call ends (grpcio then stops taking
    from it). Counts into sent[0] when given."""
    deadline = time.monotonic() + limit
    i = 0
    while time.monotonic() < deadline:
        yield str(i).encode().ljust(size, b".")
        i += 1
        if sent is not None:
            sent[0] = i
        time.sleep(interval)


def describe(exc: BaseException) -> str:
    """The exception's class name: how a handler saw its call end (messages
    differ across kinds of iterator and are compared elsewhere)."""
    return type(exc).__name__
