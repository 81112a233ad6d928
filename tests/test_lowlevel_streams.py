"""The low-level API's request streams (docs/low-level-api.md section 19),
maximum_concurrent_rpcs held until handler_done, and waiting for room:
what the extension returns and raises for each, with a grpcio client."""

import threading
import time

import grpc
import pytest

import pygrpc_native
from pygrpc_native import EVENT_CALL, EVENT_HALF_CLOSE, EVENT_MESSAGE, EVENT_ROOM
from h2_raw import RawH2, grpc_message, request_headers
from hyperframe.frame import WindowUpdateFrame
from lowlevel_helpers import SAY, WAIT, next_event, run_with_timeout, say, started_front

pytestmark = pytest.mark.timeout(60)

COLLECT = "/echo.Echo/Collect"
CHAT = "/echo.Echo/Chat"
STREAMS = ((COLLECT, False, True), (CHAT, True, True), (SAY, False))
COLLECT_ID, CHAT_ID, SAY_ID = 0, 1, 2


def _gated(messages, gate):
    """The messages, then the half-close once gate is set."""
    yield from messages
    gate.wait(WAIT)


def test_events_under_credit():
    with started_front(STREAMS) as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = ch.stream_unary(COLLECT).future(iter([b"a", b"b", b"c"]), timeout=WAIT)
        kind, call_id, method_id, payload, _ = next_event(front)
        assert (kind, method_id, payload) == (EVENT_CALL, COLLECT_ID, None)
        assert front.recv_batch(8, 0.2) == []  # nothing is read without credit
        assert front.request_messages(call_id, 2) is True
        got = [next_event(front, kind=EVENT_MESSAGE)[3] for _ in range(2)]
        assert front.recv_batch(8, 0.2) == []
        assert front.request_messages(call_id) is True
        got.append(next_event(front, kind=EVENT_MESSAGE)[3])
        front.request_messages(call_id)  # the half-close takes a credit too
        kind, half_closed_id, _, payload, _ = next_event(front)
        assert (kind, half_closed_id, payload) == (EVENT_HALF_CLOSE, call_id, None)
        assert front.respond(call_id, b"".join(got)) is True
        assert fut.result(timeout=WAIT) == b"abc"
        assert front.request_messages(call_id) is False  # the call has ended


def test_pulled_messages_small_and_large():
    big = bytes(range(256)) * 64  # 16 KiB: beyond the read's stack buffer
    gate = threading.Event()
    with started_front(STREAMS) as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        call = ch.stream_stream(CHAT)(_gated([b"small", big, b""], gate), timeout=WAIT)
        _, call_id, _, _, _ = next_event(front, kind=EVENT_CALL)
        assert front.read_message(call_id) == b"small"
        assert front.read_message(call_id) == big
        assert front.read_message(call_id) == b""
        with pytest.raises(ValueError, match="read_message"):
            front.request_messages(call_id)  # mixed with pulling
        gate.set()
        assert front.read_message(call_id) is None  # the client half-closed
        assert front.read_message(call_id) is None  # and again
        assert front.send_message(call_id, b"bye") is True
        assert front.finish(call_id, 0, "") is True
        assert list(call) == [b"bye"]
        assert front.read_message(call_id) is False  # the call has ended


def test_a_cancelled_call_ends_a_waiting_read():
    gate = threading.Event()
    with started_front(STREAMS) as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        call = ch.stream_stream(CHAT)(_gated([], gate), timeout=WAIT)
        _, call_id, _, _, _ = next_event(front, kind=EVENT_CALL)
        threading.Timer(0.2, call.cancel).start()
        assert front.read_message(call_id) is False
        gate.set()


def test_misuse_raises():
    with started_front(STREAMS) as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"x", timeout=WAIT)
        _, call_id, _, _, _ = next_event(front, kind=EVENT_CALL)
        with pytest.raises(ValueError, match="not client-streaming"):
            front.request_messages(call_id)
        with pytest.raises(ValueError, match="not client-streaming"):
            front.read_message(call_id)
        with pytest.raises(ValueError, match="at least 1"):
            front.request_messages(call_id, 0)
        with pytest.raises(ValueError, match="unknown call id"):
            front.read_message(10**9)
        with pytest.raises(TypeError):
            front.request_messages("1")
        front.respond(call_id, b"x")
        assert fut.result(timeout=WAIT) == b"x"


def test_add_method_client_streaming():
    with started_front(STREAMS) as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        method_id = front.add_method("/echo.Echo/Late", False, client_streaming=True)
        fut = ch.stream_unary("/echo.Echo/Late").future(iter([b"late"]), timeout=WAIT)
        kind, call_id, got_id, payload, _ = next_event(front)
        assert (kind, got_id, payload) == (EVENT_CALL, method_id, None)
        assert front.read_message(call_id) == b"late"
        assert front.read_message(call_id) is None
        front.respond(call_id, b"ok")
        assert fut.result(timeout=WAIT) == b"ok"


def test_hold_slots_until_handler_done():
    with started_front(STREAMS, maximum_concurrent_rpcs=1, hold_slots=True) as front, grpc.insecure_channel(
        f"127.0.0.1:{front.port}"
    ) as ch:
        fut = say(ch).future(b"first", timeout=0.5)
        _, first, _, _, _ = next_event(front, kind=EVENT_CALL)  # taken, never answered
        with pytest.raises(grpc.RpcError) as info:
            fut.result(timeout=WAIT)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        with pytest.raises(grpc.RpcError) as info:
            say(ch)(b"second", timeout=WAIT)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert front.handler_done(first) is True
        assert front.handler_done(first) is False
        fut = say(ch).future(b"third", timeout=WAIT)
        _, third, _, _, _ = next_event(front, kind=EVENT_CALL)
        front.respond(third, b"third")
        assert fut.result(timeout=WAIT) == b"third"
        assert front.handler_done(third) is True


def test_room_after_a_full_buffer():
    big = b"x" * (64 << 10)
    with started_front(STREAMS) as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        front.blocking = False
        call = ch.stream_stream(CHAT)(iter([b"go"]), timeout=WAIT)
        _, call_id, _, _, _ = next_event(front, kind=EVENT_CALL)
        sent = 0
        while front.send_message(call_id, big) is True:
            sent += 1
            assert sent < 1000, "the buffer never filled with a client that doesn't read"
        assert front.notify_room(call_id) is True
        first = next(call)  # the client reads: room is made
        kind, room_id, _, payload, _ = next_event(front, kind=EVENT_ROOM)
        assert (room_id, payload, first) == (call_id, None, big)
        assert front.wait_room(call_id) is True
        front.finish(call_id, 0, "")
        assert 1 + len(list(call)) == sent  # every message sent arrived
        assert front.wait_room(call_id) is False  # the call has ended


def _stalled_chat(front, raw):
    """A bidi call from raw, a client that never reads (nor grants the
    stream more window), whose buffer the front fills (the front is
    non-blocking) with messages larger than the buffer's 64 KiB (each goes
    in alone), so that even an op with no payload finds no room; its call
    id."""
    raw.headers(1, request_headers(CHAT))
    raw.data(1, grpc_message(b"go"), end_stream=False)
    _, call_id, _, _, _ = next_event(front, kind=EVENT_CALL)
    sent = 0
    for _ in range(2):  # again once the first message is taken and waits for the window
        while front.send_message(call_id, b"x" * (80 << 10)) is True:
            sent += 1
            assert sent < 1000, "the buffer never filled with a client that doesn't read"
        time.sleep(0.2)
    return call_id


def test_cancel_of_a_full_call_never_waits():
    """cancel() on a call whose buffer is full returns at once on a
    non-blocking front (an event loop's thread must never wait); it waited
    for room, which a client that stopped reading never makes. The client
    gets what was queued before it, then CANCELLED."""
    with started_front(STREAMS) as front, RawH2(front.port) as raw:
        front.blocking = False
        call_id = _stalled_chat(front, raw)
        assert run_with_timeout(lambda: front.cancel(call_id), 2.0, "cancel() of a full call") is True
        raw.send(WindowUpdateFrame(1, 1 << 20))  # the client reads at last
        assert raw.statuses([1]) == {1: "1"}  # CANCELLED


def test_a_refused_message_on_a_full_call_leaves_its_connection_serving():
    """A request message over the receive limit, on a call whose buffer is
    full: the front ends the call RESOURCE_EXHAUSTED, and its connection
    serves on. The default transport queued that end on the connection's
    reader, waiting there for room that only the client's WINDOW_UPDATE
    (which that reader would read) could make: every call on the
    connection hung."""
    with started_front(STREAMS, options=[("grpc.max_receive_message_length", 1000)]) as front, RawH2(front.port) as raw:
        front.blocking = False
        call_id = _stalled_chat(front, raw)
        assert front.request_messages(call_id, 2) is True
        assert next_event(front, kind=EVENT_MESSAGE)[3] == b"go"
        raw.data(1, grpc_message(b"r" * 1001), end_stream=False)
        raw.unary(3, SAY, b"hello")
        _, say_id, method_id, payload, _ = next_event(front, kind=EVENT_CALL)
        assert (method_id, payload) == (SAY_ID, b"hello")
        assert front.respond(say_id, b"hello") is True
        raw.send(WindowUpdateFrame(1, 1 << 20))
        assert raw.statuses([1, 3]) == {1: "8", 3: "0"}


def test_events_of_a_stream_are_exported():
    assert {"EVENT_MESSAGE", "EVENT_HALF_CLOSE", "EVENT_ROOM"} <= set(pygrpc_native.__all__)
