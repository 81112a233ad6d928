"""Pins the public names, signatures and event tuples of the low-level API.

The README promises that the 0.1 names, signatures and event tuples of
NativeGrpcFront won't change or go away within 0.x, and that new parameters
are only added after the existing ones, with a default. This file is that
promise: a change that breaks it must fail here.
"""

import inspect
import subprocess
import sys

import grpc
import pytest

import pygrpc_native
from pygrpc_native import EVENT_CALL, EVENT_CANCEL, NativeGrpcFront

from lowlevel_helpers import SAY, SAY_ID, next_event, say, started_front

pytestmark = pytest.mark.timeout(60)

_EMPTY = inspect.Parameter.empty

# (name, default) in order; _EMPTY means required.
INIT_PARAMS = [
    ("address", _EMPTY),
    ("methods", _EMPTY),
    ("options", None),
    ("bearer_tokens", None),
    ("ordered", False),
    # Added after 0.1's first five, each with a default.
    ("resolve_unknown", False),
    ("maximum_concurrent_rpcs", None),
    ("fallback", None),
    ("credentials", None),
    ("health", False),
    ("hold_slots", False),
    ("metrics_address", None),
    ("metrics_all_methods", False),
    ("hold_refusals", False),
]

METHOD_PARAMS = {
    "start": [],
    "stop": [("grace", None), ("wait", True)],
    "recv_batch": [("max_events", _EMPTY), ("timeout", None), ("client_keys", True)],
    "respond": [("call_id", _EMPTY), ("payload", _EMPTY)],
    "send_message": [("call_id", _EMPTY), ("payload", _EMPTY)],
    "send_initial_metadata": [("call_id", _EMPTY), ("metadata", _EMPTY)],
    "finish": [
        ("call_id", _EMPTY),
        ("code", 0),
        ("details", None),
        ("trailing_metadata", None),
        ("payload", None),
    ],
    "cancel": [("call_id", _EMPTY)],
    "is_active": [("call_id", _EMPTY)],
    "time_remaining": [("call_id", _EMPTY)],
    "call_details": [("call_id", _EMPTY)],
    "metrics": [],
    "bind": [("address", None)],
    "add_method": [("path", _EMPTY), ("server_streaming", _EMPTY), ("client_streaming", False)],
    "add_fallback_method": [("path", _EMPTY)],
    "route": [("call_id", _EMPTY), ("method_id", _EMPTY)],
    "watch": [("call_id", _EMPTY)],
    "recv_watched": [("max_events", _EMPTY), ("timeout", None)],
    "event_fd": [],
    "set_compression": [("call_id", _EMPTY), ("name", _EMPTY)],
    "disable_next_message_compression": [("call_id", _EMPTY)],
    # Request streams, maximum_concurrent_rpcs as grpcio counts, room (issue 23).
    "request_messages": [("call_id", _EMPTY), ("n", 1)],
    "read_message": [("call_id", _EMPTY)],
    "handler_done": [("call_id", _EMPTY)],
    "wait_room": [("call_id", _EMPTY)],
    "notify_room": [("call_id", _EMPTY)],
}

METRIC_KEYS = {
    "calls_started",
    "calls_completed",
    "calls_cancelled",
    "calls_deadline_exceeded",
    "calls_refused",
    "calls_active",
    "events_queued",
    "batches_delivered",
    "events_delivered",
    "connections_active",
    "connections_total",
    "bytes_in",
    "bytes_out",
    "calls_proxied",
    "goroutines",
}


def _params(func, skip_self=True):
    params = list(inspect.signature(func).parameters.values())
    if skip_self and params and params[0].name == "self":
        params = params[1:]
    return params


def _check_params(where, params, expected):
    got = [(p.name, p.default) for p in params[: len(expected)]]
    assert got == expected, f"{where}: parameters changed: {got} != {expected}"
    for p in params[: len(expected)]:
        assert p.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.POSITIONAL_ONLY,
        ), f"{where}: {p.name} must stay positional ({p.kind})"
    for p in params[len(expected):]:
        assert p.default is not _EMPTY or p.kind in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ), f"{where}: a new parameter {p.name} must have a default"


def test_lookup_and_fallback_constants():
    assert pygrpc_native.EVENT_LOOKUP == 3
    assert pygrpc_native.FALLBACK == -1


def test_request_stream_and_room_constants():
    assert (pygrpc_native.EVENT_MESSAGE, pygrpc_native.EVENT_HALF_CLOSE, pygrpc_native.EVENT_ROOM) == (4, 5, 6)


def test_blocking_attribute():
    front = NativeGrpcFront("127.0.0.1:0", [])
    assert front.blocking is True
    front.blocking = False
    assert front.blocking is False
    with pytest.raises(TypeError):
        front.blocking = 1


def test_event_constants():
    assert EVENT_CALL == 1
    assert EVENT_CANCEL == 2
    assert type(EVENT_CALL) is int
    assert type(EVENT_CANCEL) is int
    assert pygrpc_native.EVENT_CALL is EVENT_CALL
    assert pygrpc_native.EVENT_CANCEL is EVENT_CANCEL


def test_aio_after_a_plain_import():
    """pygrpc_native.aio.server() needs only `import pygrpc_native`, as
    grpc.aio.server() needs only `import grpc` (the README's one-line
    switch); the import itself still loads neither aio nor the Go core."""
    code = (
        "import sys, grpc, pygrpc_native\n"
        "loaded = sorted(m for m in ('pygrpc_native.aio', 'pygrpc_native._native') if m in sys.modules)\n"
        "listed = 'aio' in dir(pygrpc_native)\n"
        "import asyncio\n"
        "async def main():\n"
        "    return isinstance(pygrpc_native.aio.server(), grpc.aio.Server), isinstance(grpc.aio.server(), grpc.aio.Server)\n"
        "made = asyncio.run(main())\n"
        "import pygrpc_native.aio as direct\n"
        "print(loaded, listed, made, pygrpc_native.aio is direct)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[-2] == "[] True (True, True) True"


def test_front_is_a_class():
    assert inspect.isclass(NativeGrpcFront)
    assert pygrpc_native.NativeGrpcFront is NativeGrpcFront


def test_init_signature():
    try:
        params = _params(NativeGrpcFront.__init__)
    except (TypeError, ValueError):
        params = _params(NativeGrpcFront, skip_self=False)
    _check_params("NativeGrpcFront.__init__", params, INIT_PARAMS)


def test_init_accepts_keywords():
    front = NativeGrpcFront(
        address="127.0.0.1:0",
        methods=[(SAY, False)],
        options=[("grpc.max_receive_message_length", 1024)],
        bearer_tokens={"t": "k"},
        ordered=True,
    )
    assert front.port == 0
    front.start()
    assert front.port > 0
    front.stop()


@pytest.mark.parametrize("name", sorted(METHOD_PARAMS))
def test_method_exists_and_signature(name):
    method = getattr(NativeGrpcFront, name, None)
    assert method is not None, f"NativeGrpcFront.{name} is missing"
    assert callable(method)
    try:
        params = _params(method)
    except (TypeError, ValueError):
        pytest.skip(f"{name} has no introspectable signature (C method without __text_signature__)")
    _check_params(f"NativeGrpcFront.{name}", params, METHOD_PARAMS[name])


def test_port_is_an_int_attribute():
    front = NativeGrpcFront("127.0.0.1:0", [(SAY, False)])
    try:
        assert front.port == 0
        assert type(front.port) is int
        front.start()
        assert type(front.port) is int
        assert 0 < front.port < 65536
    finally:
        front.stop()


@pytest.mark.timeout(30)
def test_event_tuple_shape():
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"shape", timeout=10)
        event = next_event(front)
        assert type(event) is tuple
        assert len(event) == 5
        kind, call_id, method_id, payload, client_key = event
        assert kind == EVENT_CALL and type(kind) is int
        assert type(call_id) is int and call_id > 0
        assert method_id == SAY_ID and type(method_id) is int
        assert payload == b"shape" and type(payload) is bytes
        assert type(client_key) is str and client_key.startswith("ipv4:127.0.0.1:")
        fut.cancel()
        cancel = next_event(front, kind=EVENT_CANCEL)
        assert type(cancel) is tuple and len(cancel) == 5
        kind, cid, mid, payload, key = cancel
        assert (kind, cid, mid, payload, key) == (EVENT_CANCEL, call_id, method_id, None, client_key)


@pytest.mark.timeout(30)
def test_metrics_keys_and_types():
    front = NativeGrpcFront("127.0.0.1:0", [(SAY, False)])
    try:
        m = front.metrics()
        assert isinstance(m, dict)
        assert METRIC_KEYS <= set(m), f"missing metrics: {METRIC_KEYS - set(m)}"
        for k, v in m.items():
            assert type(k) is str
            assert type(v) is int, f"{k} is {type(v)}"
        front.start()
        m = front.metrics()
        assert METRIC_KEYS <= set(m)
    finally:
        front.stop()


@pytest.mark.timeout(30)
def test_call_details_keys():
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"x", timeout=10)
        _, call_id, _, _, _ = next_event(front)
        d = front.call_details(call_id)
        assert isinstance(d, dict)
        assert {"method", "invocation_metadata", "peer", "authority", "client_key", "time_remaining"} <= set(d)
        assert type(d["invocation_metadata"]) is tuple
        front.respond(call_id, b"ok")
        assert fut.result(timeout=10) == b"ok"


@pytest.mark.timeout(30)
def test_documented_keywords_are_accepted():
    """The signatures the docs give name these parameters with defaults
    (``recv_batch(max_events, timeout=None)``, ``stop(grace=None)``,
    ``finish(call_id, code=0, details=None, trailing_metadata=None,
    payload=None)``), so passing them by keyword must work."""
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        assert front.recv_batch(4, timeout=0.05) == []
        assert front.recv_batch(max_events=4, timeout=0.05) == []
        fut = say(ch).future(b"kw", timeout=10)
        _, call_id, _, _, _ = next_event(front)
        assert front.finish(call_id=call_id, code=0, details=None, trailing_metadata=None, payload=b"kw!")
        assert fut.result(timeout=10) == b"kw!"
    other = NativeGrpcFront("127.0.0.1:0", [(SAY, False)])
    other.start()
    other.stop(grace=0.1)


def test_native_stub_lists_every_method_of_the_extension():
    """_native.pyi (what type checkers see) names exactly the methods and
    module attributes the compiled extension has."""
    import ast
    import pathlib

    import pygrpc_native
    from pygrpc_native import _native

    stub = ast.parse((pathlib.Path(pygrpc_native.__file__).parent / "_native.pyi").read_text())
    front = next(n for n in stub.body if isinstance(n, ast.ClassDef) and n.name == "Front")
    stubbed = {n.name for n in front.body if isinstance(n, ast.FunctionDef)}
    stubbed |= {n.target.id for n in front.body if isinstance(n, ast.AnnAssign)}
    actual = {name for name in vars(_native.Front) if not name.startswith("__")}
    assert stubbed - {"__init__"} == actual
    module_names = {n.target.id for n in stub.body if isinstance(n, ast.AnnAssign)}
    module_names |= {n.name for n in stub.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert module_names == {name for name in vars(_native) if not name.startswith("__")}
