"""Run the same scenario against grpc.server() and pygrpc_native.server().

A *scenario* is a function ``scenario(run) -> value`` where ``run`` is a
``Run``: a started server of one kind (``run.kind`` is ``"grpcio"`` or
``"native"``) with a grpcio channel to it, plus a ``run.state`` the servicer
can record into. ``both(setup, scenario, ...)`` builds a fresh server of each
kind with ``setup(server, state)``, runs the scenario on each and returns the
two values; ``same(...)`` also asserts they are equal.

Calls go through real grpcio clients. Messages are raw bytes (no
serializer) unless a test uses generated code. Every blocking step has a time
limit: nothing here waits forever.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import re
import threading
import time
from concurrent import futures
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import grpc

import pygrpc_native

KINDS = ("grpcio", "native")
SERVICE = "diff.Diff"

# How long a call may take unless a test says otherwise.
CALL_TIMEOUT = 5.0
# How long a test waits for something on the server side that should happen at once.
WAIT = 5.0

# Handler exceptions are logged by both servers; keep the test output readable.
logging.getLogger("grpc._server").setLevel(logging.CRITICAL)
logging.getLogger("pygrpc_native").setLevel(logging.CRITICAL)


def method(name: str, service: str = SERVICE) -> str:
    return f"/{service}/{name}"


def factory(kind: str) -> Callable[..., grpc.Server]:
    if kind == "grpcio":
        return grpc.server
    if kind == "native":
        return pygrpc_native.server
    raise ValueError(kind)


class State:
    """What the servicer saw, shared between the handler threads and the test."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.records: Dict[str, Any] = {}
        self.events: Dict[str, threading.Event] = {}

    def record(self, key: str, value: Any) -> None:
        with self._cond:
            self.records[key] = value
            self._cond.notify_all()

    def append(self, key: str, value: Any) -> None:
        with self._cond:
            self.records.setdefault(key, []).append(value)
            self._cond.notify_all()

    def wait_for(self, key: str, timeout: float = WAIT) -> Any:
        """The value recorded under key, waiting up to timeout for it; a
        missing value comes back as the string '<missing>' (compared, so a
        side that never records it differs visibly instead of hanging)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while key not in self.records:
                left = deadline - time.monotonic()
                if left <= 0:
                    return "<missing>"
                self._cond.wait(left)
            return self.records[key]

    def event(self, name: str) -> threading.Event:
        with self._cond:
            return self.events.setdefault(name, threading.Event())


@dataclasses.dataclass
class Run:
    kind: str
    server: grpc.Server
    port: int
    channel: grpc.Channel
    state: State
    target: str


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a grpcio client observes of one call."""

    code: grpc.StatusCode
    details: Optional[str]
    initial_metadata: Tuple[Tuple[str, Any], ...]
    trailing_metadata: Tuple[Tuple[str, Any], ...]
    responses: Tuple[bytes, ...]

    def brief(self) -> Tuple[Any, ...]:
        return (self.code, self.details)


def _md(metadata: Any) -> Tuple[Tuple[str, Any], ...]:
    return tuple((m[0], m[1]) for m in (metadata or ()))


def setup_handlers(handlers: Dict[str, grpc.RpcMethodHandler], service: str = SERVICE):
    """A setup function registering handlers for service, the way
    grpc.method_handlers_generic_handler users do."""

    def setup(server: grpc.Server, state: State) -> None:
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))

    return setup


def unary(fn: Callable, **kwargs: Any) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(fn, **kwargs)


def stream(fn: Callable, **kwargs: Any) -> grpc.RpcMethodHandler:
    return grpc.unary_stream_rpc_method_handler(fn, **kwargs)


# The ports a server gets unless a test says otherwise: (add_*_port method, its arguments).
ANY_PORT = (("add_insecure_port", ("[::]:0",)),)


@dataclasses.dataclass
class Served:
    """A started server of one kind (serving()): what setup recorded into
    state, the ports its add_*_port() calls returned, and stop(), which
    stops it and waits up to WAIT (again: at once). loop is the aio
    server's LoopThread (aio_harness.serving)."""

    kind: str
    server: Any
    state: State
    ports: List[int]
    stop: Callable[[], None]
    loop: Any = None


@contextlib.contextmanager
def serving(
    kind: str,
    setup: Callable[[grpc.Server, State], None],
    ports: Sequence[Tuple[str, Tuple[Any, ...]]] = ANY_PORT,
    *,
    workers: int = 8,
    stop_grace: Optional[float] = 0,
    **server_kwargs: Any,
):
    """A server of one kind, set up with setup(server, state), given ports
    and started; a Served. Stopped at the end."""
    pool = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"diff-{kind}")
    state = State()
    server = factory(kind)(pool, **server_kwargs)

    def stop() -> None:
        server.stop(stop_grace).wait(WAIT)

    try:
        setup(server, state)
        bound = [getattr(server, add)(*args) for add, args in ports]
        server.start()
        yield Served(kind, server, state, bound, stop)
    finally:
        stop()
        pool.shutdown(wait=False, cancel_futures=True)


@contextlib.contextmanager
def channel_to(served: Served, host: str, channel_options: Optional[Sequence[Tuple[str, Any]]]):
    """(a ready grpcio channel, its target) to served's first port on host;
    closed once the server has stopped (a channel closed while its
    connection is up takes 200 ms to close)."""
    port = served.ports[0]
    target = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    channel = grpc.insecure_channel(target, options=channel_options)
    try:
        grpc.channel_ready_future(channel).result(timeout=WAIT)
        yield channel, target
    finally:
        served.stop()
        channel.close()


@contextlib.contextmanager
def running(
    kind: str,
    setup: Callable[[grpc.Server, State], None],
    *,
    address: str = "[::]:0",
    host: str = "127.0.0.1",
    channel_options: Optional[Sequence[Tuple[str, Any]]] = None,
    **serving_kwargs: Any,
):
    """A started server of one kind (serving(), on address), with a channel
    to it; stopped at the end."""
    with serving(kind, setup, [("add_insecure_port", (address,))], **serving_kwargs) as served:
        with channel_to(served, host, channel_options) as (channel, target):
            yield Run(kind, served.server, served.ports[0], channel, served.state, target)


def on_each_kind(running_one: Callable[..., Any], setup, scenario: Callable[[Any], Any], **kwargs: Any) -> Tuple[Any, Any]:
    """(grpcio's result, ours): scenario on a fresh server of each kind,
    started by running_one(kind, setup, **kwargs) (running here, or
    aio_harness.running)."""
    results = []
    for kind in KINDS:
        with running_one(kind, setup, **kwargs) as run:
            results.append(scenario(run))
    return results[0], results[1]


def both(setup, scenario: Callable[[Run], Any], **kwargs: Any) -> Tuple[Any, Any]:
    """Runs scenario against a fresh grpcio server and a fresh native server."""
    return on_each_kind(running, setup, scenario, **kwargs)


def for_both(fn: Callable[[str], Any]) -> Any:
    """fn(kind) for each kind, for scenarios that drive the server
    themselves; asserts the results are equal and returns grpcio's."""
    results = {kind: fn(kind) for kind in KINDS}
    assert results["native"] == results["grpcio"], (
        f"\n  grpcio:        {results['grpcio']!r}\n  pygrpc_native: {results['native']!r}"
    )
    return results["grpcio"]


def metadata_in_key_order(metadata: Tuple[Tuple[str, Any], ...]) -> Tuple[Tuple[str, Any], ...]:
    """Metadata grouped by key, values of a key in their order. Response
    metadata order across different keys is a documented known difference
    (grpc-go keeps metadata in a map), so outcomes are compared this way."""
    return tuple(sorted(metadata, key=lambda kv: kv[0]))


def comparable(value: Any) -> Any:
    """value with every Outcome's metadata in key order (see above)."""
    if isinstance(value, Outcome):
        return dataclasses.replace(
            value,
            initial_metadata=metadata_in_key_order(value.initial_metadata),
            trailing_metadata=metadata_in_key_order(value.trailing_metadata),
        )
    if type(value) in (list, tuple):  # not named tuples such as _Metadatum
        return type(value)(comparable(v) for v in value)
    return value


def same(setup, scenario: Callable[[Run], Any], **kwargs: Any) -> Any:
    """Runs scenario against both servers, asserts identical results (up to
    the documented metadata order), and returns grpcio's, as observed (so a
    test can also pin what grpcio does)."""
    ref, ours = both(setup, scenario, **kwargs)
    assert comparable(ours) == comparable(ref), f"\n  grpc.server():          {ref!r}\n  pygrpc_native.server(): {ours!r}"
    return ref


# -- calls --------------------------------------------------------------------


def call(
    channel: grpc.Channel,
    path: str,
    request: bytes = b"",
    *,
    streaming: bool = False,
    metadata: Optional[Sequence[Tuple[str, Any]]] = None,
    timeout: Optional[float] = CALL_TIMEOUT,
) -> Outcome:
    """One call to path, unary or (streaming) response-streaming, as the
    client saw it; a stream's messages are those read before it ended."""
    if not streaming:
        try:
            response, unary_call = channel.unary_unary(path).with_call(request, metadata=metadata, timeout=timeout)
        except grpc.RpcError as err:
            return outcome_of(err)
        return outcome_of(unary_call, (response,))
    stream_call = channel.unary_stream(path)(request, metadata=metadata, timeout=timeout)
    return outcome_of(stream_call, read_all(stream_call))


def read_all(stream_call: Any) -> List[bytes]:
    """The responses a streaming call gives until it ends, however it ends
    (its status says how)."""
    responses: List[bytes] = []
    try:
        for response in stream_call:
            responses.append(response)
    except grpc.RpcError:
        pass
    return responses


call_unary = functools.partial(call, streaming=False)
call_stream = functools.partial(call, streaming=True)


def future_outcome(future: grpc.Future, timeout: float = WAIT) -> Any:
    """How a call's future ends: "ok", its status code, or "no answer"
    when it has not ended within timeout."""
    try:
        future.result(timeout=timeout)
        return "ok"
    except grpc.FutureTimeoutError:
        return "no answer"
    except grpc.RpcError as err:
        return err.code()


def cancel_unary_once_entered(run: Any, path: str) -> bool:
    """Starts a unary call to path, waits until its handler sets the run's
    "entered" event, cancels the call; whether its future says cancelled."""
    future = run.channel.unary_unary(path).future(b"", timeout=10)
    assert run.state.event("entered").wait(WAIT)
    future.cancel()
    return future.cancelled()


def cancel_stream_once_entered(run: Any, path: str) -> Tuple[Any, Any, Any]:
    """Starts a response-streaming call to path, reads its first message,
    waits until the handler sets the run's "entered" event and cancels the
    call; (the first message, the rest or "error", the call)."""
    call = run.channel.unary_stream(path)(b"", timeout=10)
    first = next(call)
    assert run.state.event("entered").wait(WAIT)
    call.cancel()
    try:
        rest = list(call)
    except grpc.RpcError:
        rest = "error"
    return first, rest, call


def outcome_of(err_or_call: Any, responses: Sequence[bytes] = ()) -> Outcome:
    return Outcome(
        err_or_call.code(),
        err_or_call.details(),
        _md(err_or_call.initial_metadata()),
        _md(err_or_call.trailing_metadata()),
        tuple(responses),
    )


# grpcio 1.85 writes IPv6 peers with URL-escaped brackets: "ipv6:%5B::1%5D:port".
_PEER = re.compile(r"^(ipv4:[0-9.]+|ipv6:(?:\[|%5B)[0-9a-fA-F:.]+(?:\]|%5D)):(\d+)$")


def peer_shape(peer: str) -> str:
    """'ipv4:127.0.0.1:54321' -> 'ipv4:127.0.0.1:<port>' (ports differ run to
    run); anything else comes back marked unrecognised."""
    m = _PEER.match(peer)
    if not m:
        return f"<unrecognised peer {peer!r}>"
    return f"{m.group(1)}:<port>"


def retrying_channel_options(service: str = SERVICE) -> List[Tuple[str, Any]]:
    """Channel options for grpcio's retry policy: up to 3 attempts of the
    service's calls that end UNAVAILABLE, 10 ms apart."""
    policy = {
        "methodConfig": [
            {
                "name": [{"service": service}],
                "retryPolicy": {
                    "maxAttempts": 3,
                    "initialBackoff": "0.01s",
                    "maxBackoff": "0.01s",
                    "backoffMultiplier": 1,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
    return [("grpc.enable_retries", 1), ("grpc.service_config", json.dumps(policy))]


def wait_until(predicate: Callable[[], bool], timeout: float = WAIT, interval: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
