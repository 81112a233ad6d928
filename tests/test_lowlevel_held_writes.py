"""Held sends, the shim's side of aio.server()'s writes (Front._hold_writes,
private): the ops that end a call (respond, finish) made on the holding
thread leave their frames in Go until the loop's next turn flushes them all
at once (_flush_writes, scheduled once through the loop's call_soon);
messages and headers, sends from any other thread, and every send once
call_soon fails, are written as before. On the h2 transport,
whatever PGN_TRANSPORT says: grpc-go's transport writes on its own
goroutines and holds nothing."""

import threading

import grpc
import pytest

from pygrpc_native import EVENT_CALL

from lowlevel_helpers import WAIT, count, next_events, say, started_front

pytestmark = pytest.mark.timeout(60)

H2 = [("grpc.pygrpc_native.transport", "h2")]

# How long an answer that must stay held is watched for.
HELD = 0.3


@pytest.fixture
def calls():
    """(front, channel, submit) on a started non-blocking h2 front; submit(n)
    makes n unary calls and returns their futures and call ids."""
    with started_front(options=H2) as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        front.blocking = False

        def submit(n):
            futures = [say(ch).future(b"q", timeout=30) for _ in range(n)]
            ids = [e[1] for e in next_events(front, n, kind=EVENT_CALL)]
            return futures, ids

        yield front, submit
        front._hold_writes(None)


def test_held_answers_leave_at_the_scheduled_flush(calls):
    front, submit = calls
    scheduled = []
    front._hold_writes(scheduled.append)
    futures, ids = submit(3)
    for call_id in ids:
        assert front.respond(call_id, b"held") is True
    assert len(scheduled) == 1, "one flush per turn of the loop, however many sends"
    done, _ = _wait(futures, HELD)
    assert not done, "an answer left before the flush"
    scheduled.pop()()
    assert [f.result(timeout=WAIT) for f in futures] == [b"held"] * 3
    # The next send after a flush schedules the next flush.
    (future,), (call_id,) = submit(1)
    assert front.finish(call_id, 5, "gone") is True
    assert len(scheduled) == 1
    scheduled.pop()()
    with pytest.raises(grpc.RpcError) as err:
        future.result(timeout=WAIT)
    assert err.value.code() is grpc.StatusCode.NOT_FOUND


def test_messages_and_headers_are_not_held(calls):
    """A coroutine may block the loop after it writes: its client gets what
    it wrote first, as with grpc.aio. Only the call's end waits."""
    front, _ = calls
    scheduled = []
    front._hold_writes(scheduled.append)
    with grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        stream = count(ch)(b"q", timeout=30)
        (event,) = next_events(front, 1, kind=EVENT_CALL)
        call_id = event[1]
        assert front.send_initial_metadata(call_id, [("k", "v")]) is True
        assert front.send_message(call_id, b"first") is True
        assert scheduled == []
        assert next(stream) == b"first"
        assert ("k", "v") in stream.initial_metadata()
        assert front.finish(call_id, 0) is True
        assert len(scheduled) == 1
        scheduled.pop()()
        assert list(stream) == []
        assert stream.code() is grpc.StatusCode.OK


def test_sends_from_another_thread_are_written_at_once(calls):
    front, submit = calls
    scheduled = []
    front._hold_writes(scheduled.append)
    (future,), (call_id,) = submit(1)
    sent = []
    thread = threading.Thread(target=lambda: sent.append(front.respond(call_id, b"thread")))
    thread.start()
    thread.join(WAIT)
    assert sent == [True]
    assert future.result(timeout=WAIT) == b"thread"
    assert scheduled == []


def test_a_failing_call_soon_writes_at_once(calls):
    front, submit = calls
    attempts = []

    def closed_loop(callback):
        attempts.append(callback)
        raise RuntimeError("Event loop is closed")

    front._hold_writes(closed_loop)
    futures, ids = submit(2)
    for call_id in ids:
        assert front.respond(call_id, b"now") is True
    assert [f.result(timeout=WAIT) for f in futures] == [b"now"] * 2
    assert len(attempts) == 2, "each send found no flush pending"


def test_stopping_the_hold_writes_out_what_is_held(calls):
    front, submit = calls
    front._hold_writes(lambda callback: None)  # a flush that never runs
    (future,), (call_id,) = submit(1)
    assert front.respond(call_id, b"held") is True
    done, _ = _wait([future], HELD)
    assert not done
    front._hold_writes(None)
    assert future.result(timeout=WAIT) == b"held"
    # From here sends are written at once again.
    (future,), (call_id,) = submit(1)
    assert front.respond(call_id, b"now") is True
    assert future.result(timeout=WAIT) == b"now"


def test_hold_writes_takes_a_callable_or_none(calls):
    front, _ = calls
    with pytest.raises(TypeError, match="call_soon"):
        front._hold_writes(42)


def _wait(futures, timeout):
    """(done, not done) after up to timeout."""
    event = threading.Event()
    for f in futures:
        f.add_done_callback(lambda _f: event.set())
    event.wait(timeout)
    done = [f for f in futures if f.done()]
    return done, [f for f in futures if not f.done()]
