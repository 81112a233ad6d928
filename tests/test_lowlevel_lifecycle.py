"""How calls and fronts end: deadlines, client cancellation, lost
connections, stop(grace), start/stop misuse, bind errors and recv_batch."""

import socket
import threading
import time

import grpc
import pytest

from pygrpc_native import EVENT_CALL, EVENT_CANCEL, NativeGrpcFront

from lowlevel_helpers import (
    COUNT_ID,
    METHODS,
    SAY,
    SAY_ID,
    WAIT,
    count,
    echo,
    ignore,
    next_event,
    run_with_timeout,
    say,
    serving,
    started_front,
    stop_front,
    wait_until,
)

pytestmark = pytest.mark.timeout(60)


# ---------------------------------------------------------------- deadlines


def test_unanswered_call_gets_deadline_exceeded_and_python_a_cancel():
    with serving(ignore) as s, s.channel() as ch:
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as info:
            say(ch)(b"never answered", timeout=0.5)
        took = time.monotonic() - t0
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert 0.4 < took < 5
        call = s.log.wait_call(b"never answered")
        cancel = s.log.wait_cancel(call[1])
        assert cancel == (EVENT_CANCEL, call[1], SAY_ID, None, call[4])
        assert s.front.is_active(call[1]) is False
        assert s.front.respond(call[1], b"too late") is False


def test_unanswered_calls_always_get_deadline_exceeded():
    """The server must not beat the client's own deadline timer with a
    reset: grpcio clients then report CANCELLED instead of
    DEADLINE_EXCEEDED (grpcio servers never do that)."""
    codes = []
    with serving(ignore) as s, s.channel() as ch:
        for _ in range(40):
            try:
                say(ch)(b"d", timeout=0.2)
            except grpc.RpcError as e:
                codes.append(e.code())
        s.log.wait_count(EVENT_CANCEL, 40)
    events = s.log.snapshot()
    position = {(e[0], e[1]): i for i, e in enumerate(events)}
    for e in events:
        if e[0] == EVENT_CANCEL:
            assert position[(EVENT_CALL, e[1])] < position[(EVENT_CANCEL, e[1])], "a cancel came before its call"
    assert len(codes) == 40
    wrong = [c for c in codes if c != grpc.StatusCode.DEADLINE_EXCEEDED]
    assert not wrong, f"{len(wrong)} of 40 unanswered calls ended with {set(wrong)} instead of DEADLINE_EXCEEDED"


def test_streaming_deadline_mid_stream():
    def handler(front, event):
        if event[0] == EVENT_CALL:
            front.send_message(event[1], b"one")  # then nothing

    with serving(handler) as s, s.channel() as ch:
        got = []
        with pytest.raises(grpc.RpcError) as info:
            for m in count(ch)(b"", timeout=0.7):
                got.append(m)
        assert got == [b"one"]
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        call = s.log.wait_call()
        cancel = s.log.wait_cancel(call[1])
        assert cancel[2] == COUNT_ID and cancel[3] is None
        assert s.front.send_message(call[1], b"late") is False


def test_time_remaining_near_zero_after_deadline_is_not_negative():
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"", timeout=0.3)
        _, call_id, _, _, _ = next_event(front)
        remaining = front.time_remaining(call_id)
        assert remaining is not None and 0 <= remaining <= 0.35  # grpcio clients round the timeout header up
        cancel = next_event(front, kind=EVENT_CANCEL)
        assert cancel[1] == call_id
        # (Which status the client gets is checked by
        # test_unanswered_calls_always_get_deadline_exceeded.)
        with pytest.raises(grpc.RpcError):
            fut.result(timeout=WAIT)


# ---------------------------------------------------------------- client cancellation


def test_client_cancels_unary_future():
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"cancel me", timeout=30)
        kind, call_id, method_id, payload, key = next_event(front)
        assert (kind, payload) == (EVENT_CALL, b"cancel me")
        assert front.is_active(call_id) is True
        assert fut.cancel()
        cancel = next_event(front, kind=EVENT_CANCEL)
        assert cancel == (EVENT_CANCEL, call_id, method_id, None, key)
        assert front.is_active(call_id) is False
        assert front.respond(call_id, b"late") is False


def test_client_cancels_streaming_call():
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        call = count(ch)(b"", timeout=30)
        _, call_id, method_id, _, _ = next_event(front)
        assert method_id == COUNT_ID
        assert front.send_message(call_id, b"1")
        assert next(call) == b"1"
        call.cancel()
        cancel = next_event(front, kind=EVENT_CANCEL)
        assert cancel[1] == call_id
        assert front.is_active(call_id) is False
        assert front.send_message(call_id, b"2") is False


def test_sender_blocked_on_flow_control_is_released_by_cancel():
    """A streaming handler sending faster than the client reads must not
    stay stuck in send_message once the client cancels."""
    result = {}

    def produce(front, call_id):
        chunk = b"x" * 65536
        t0 = time.monotonic()
        n = 0
        while time.monotonic() - t0 < 20:
            if not front.send_message(call_id, chunk):
                result["stopped_after"] = n
                return
            n += 1
        result["never_stopped"] = n

    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        call = count(ch)(b"", timeout=30)
        _, call_id, _, _, _ = next_event(front)
        t = threading.Thread(target=produce, args=(front, call_id), daemon=True)
        t.start()
        for _ in range(3):
            next(call)
        time.sleep(0.5)  # let the producer fill every buffer and block
        call.cancel()
        t.join(WAIT)
        assert not t.is_alive(), "send_message stayed blocked after the client cancelled"
        assert "stopped_after" in result, result
        assert next_event(front, kind=EVENT_CANCEL)[1] == call_id


def test_stop_releases_a_sender_blocked_on_flow_control():
    result = {}

    def produce(front, call_id):
        n = 0
        try:
            while front.send_message(call_id, b"x" * 65536):
                n += 1
            result["outcome"] = "False"
        except RuntimeError:
            result["outcome"] = "RuntimeError"

    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        call = count(ch)(b"", timeout=30)  # never read
        _, call_id, _, _, _ = next_event(front)
        t = threading.Thread(target=produce, args=(front, call_id), daemon=True)
        t.start()
        time.sleep(0.5)
        assert t.is_alive(), "the client reads nothing, so the sender should be waiting"
        took = stop_front(front, grace=0.5)
        t.join(WAIT)
        assert not t.is_alive(), "send_message stayed blocked after stop()"
        assert result["outcome"] in ("False", "RuntimeError")
        assert took < 5
        with pytest.raises(grpc.RpcError):
            list(call)


def test_closed_channel_cancels_in_flight_calls():
    with started_front() as front:
        ch = grpc.insecure_channel(f"127.0.0.1:{front.port}")
        futs = [say(ch).future(b"%d" % i, timeout=30) for i in range(3)]
        calls = [next_event(front, kind=EVENT_CALL) for _ in range(3)]
        ch.close()
        for f in futs:
            with pytest.raises(grpc.RpcError):
                f.result(timeout=WAIT)
        ids = {c[1] for c in calls}
        cancelled = set()
        deadline = time.monotonic() + WAIT
        while cancelled != ids and time.monotonic() < deadline:
            batch = front.recv_batch(10, 0.5)
            cancelled |= {e[1] for e in batch if e[0] == EVENT_CANCEL}
        assert cancelled == ids
        for cid in ids:
            assert front.is_active(cid) is False


def test_cancel_event_is_not_sent_for_finished_calls():
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"", timeout=1)
        _, call_id, _, _, _ = next_event(front)
        front.respond(call_id, b"done")
        assert fut.result(timeout=WAIT) == b"done"
        time.sleep(1.3)  # past the call's deadline
        assert front.recv_batch(10, 0.3) == []


# ---------------------------------------------------------------- stop(grace)


def test_stop_grace_lets_answered_calls_finish_and_cancels_the_rest():
    held = []

    def handler(front, event):
        if event[0] == EVENT_CALL:
            held.append(event)
            if event[3] == b"answer later":
                threading.Timer(0.5, front.respond, (event[1], b"answered in grace")).start()

    with serving(handler) as s, s.channel() as ch:
        late = say(ch).future(b"answer later", timeout=30)
        never = say(ch).future(b"never", timeout=30)
        late_call = s.log.wait_call(b"answer later")
        never_call = s.log.wait_call(b"never")
        took = s.stop(grace=1.5)
        assert late.result(timeout=WAIT) == b"answered in grace"
        with pytest.raises(grpc.RpcError) as info:
            never.result(timeout=WAIT)
        assert info.value.code() != grpc.StatusCode.OK
        assert info.value.code() != grpc.StatusCode.DEADLINE_EXCEEDED
        assert 1.2 < took < 10, f"stop(1.5) took {took:.2f}s"
        s.join()
        cancels = s.log.cancels()
        assert [c[1] for c in cancels] == [never_call[1]], cancels
        assert late_call[1] not in [c[1] for c in cancels]


def test_stop_returns_early_when_nothing_is_in_flight():
    with serving() as s, s.channel() as ch:
        assert say(ch)(b"x", timeout=WAIT) == b"x"
        took = s.stop(grace=30)
        assert took < 5


def test_stop_without_grace_cancels_at_once():
    with serving(ignore) as s, s.channel() as ch:
        fut = say(ch).future(b"pending", timeout=30)
        call = s.log.wait_call(b"pending")
        took = s.stop(grace=None)
        assert took < 5
        with pytest.raises(grpc.RpcError):
            fut.result(timeout=WAIT)
        s.join()
        assert s.log.wait_cancel(call[1])


def test_new_calls_are_refused_during_and_after_stop():
    with serving(ignore) as s, s.channel() as ch:
        pending = say(ch).future(b"pending", timeout=30)
        call = s.log.wait_call(b"pending")
        stopper = threading.Thread(target=s.stop, kwargs={"grace": 5}, daemon=True)
        stopper.start()
        time.sleep(0.5)  # stop() is now waiting for the pending call
        assert stopper.is_alive()
        for target_ch in (ch, None):
            if target_ch is None:
                with s.channel() as fresh:
                    with pytest.raises(grpc.RpcError) as info:
                        say(fresh)(b"during stop (new channel)", timeout=3)
            else:
                with pytest.raises(grpc.RpcError) as info:
                    say(target_ch)(b"during stop", timeout=3)
            assert info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED), info.value
        assert s.front.respond(call[1], b"answered while stopping") is True
        assert pending.result(timeout=WAIT) == b"answered while stopping"
        stopper.join(WAIT)
        assert not stopper.is_alive()
        with pytest.raises(grpc.RpcError) as info:
            say(ch)(b"after stop", timeout=3)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        s.join()
    assert [e[3] for e in s.log.calls()] == [b"pending"], "refused calls must not reach Python"


def test_port_and_metrics_stay_readable_while_stopping():
    """Reading front.port or metrics() while stop(grace) waits for a call
    must answer at once and must not stall other Python threads."""
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        port = front.port
        fut = say(ch).future(b"x", timeout=30)
        next_event(front)
        stopper = threading.Thread(target=front.stop, args=(3,), daemon=True)
        stopper.start()
        time.sleep(0.3)
        assert stopper.is_alive()
        ticks = []
        ticking = threading.Event()

        def tick():
            ticking.set()
            t_end = time.monotonic() + 1.0
            while time.monotonic() < t_end:
                ticks.append(time.monotonic())
                time.sleep(0.05)

        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        ticking.wait(WAIT)
        t0 = time.monotonic()
        m = front.metrics()
        p = front.port
        took = time.monotonic() - t0
        ticker.join(WAIT)
        stopper.join(WAIT)
        assert m["calls_active"] in (0, 1)
        assert p in (0, port)
        assert took < 0.5, f"reading port/metrics during stop(grace=3) took {took:.2f}s"
        gaps = [b - a for a, b in zip(ticks, ticks[1:])]
        assert max(gaps, default=0) < 0.5, f"other Python threads stalled for {max(gaps):.2f}s"
        with pytest.raises(grpc.RpcError):
            fut.result(timeout=WAIT)


def test_start_while_stopping_raises():
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"x", timeout=30)
        next_event(front)
        stopper = threading.Thread(target=front.stop, args=(2,), daemon=True)
        stopper.start()
        time.sleep(0.3)
        with pytest.raises(RuntimeError):
            run_with_timeout(front.start, 5, "start() during stop")
        stopper.join(WAIT)
        with pytest.raises(grpc.RpcError):
            fut.result(timeout=WAIT)


def test_recv_batch_returns_none_after_stop_and_drain():
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"x", timeout=30)
        wait_until(lambda: front.metrics()["events_queued"] == 1, what="event to be queued")
        stop_front(front, grace=0.2)
        with pytest.raises(grpc.RpcError):
            fut.result(timeout=WAIT)
        # What was queued is still delivered: the call, then its cancel.
        drained = []
        for _ in range(20):
            batch = front.recv_batch(10, 1)
            if batch is None:
                break
            drained.extend(batch)
        else:
            pytest.fail("recv_batch never returned None after stop")
        # Either both events of the call, in order, or neither (withdrawn),
        # but never a call without its cancel.
        if drained:
            assert [e[0] for e in drained] == [EVENT_CALL, EVENT_CANCEL], drained
            assert drained[0][1] == drained[1][1]
        assert front.recv_batch(10, 1) is None
        assert run_with_timeout(lambda: front.recv_batch(10), 5, "recv_batch without timeout on a stopped front") is None


def test_stop_wakes_a_thread_blocked_in_recv_batch():
    front = NativeGrpcFront("127.0.0.1:0", METHODS)
    front.start()
    got = []

    def wait():
        got.append(front.recv_batch(16))  # no timeout

    t = threading.Thread(target=wait, daemon=True)
    t.start()
    time.sleep(0.3)
    assert t.is_alive()
    stop_front(front)
    t.join(WAIT)
    assert not t.is_alive(), "recv_batch stayed blocked after stop()"
    assert got == [None]


def test_many_threads_blocked_in_recv_batch_all_wake_on_stop():
    front = NativeGrpcFront("127.0.0.1:0", METHODS)
    front.start()
    got = []
    threads = [threading.Thread(target=lambda: got.append(front.recv_batch(4)), daemon=True) for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    stop_front(front)
    for t in threads:
        t.join(WAIT)
    assert not any(t.is_alive() for t in threads)
    assert got == [None] * 8


def test_per_call_methods_raise_runtime_error_after_stop():
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"x", timeout=30)
        _, call_id, _, _, _ = next_event(front)
        stop_front(front)
        with pytest.raises(grpc.RpcError):
            fut.result(timeout=WAIT)
        for name, args in [
            ("respond", (call_id, b"")),
            ("send_message", (call_id, b"")),
            ("send_initial_metadata", (call_id, [("k", "v")])),
            ("finish", (call_id, 0)),
            ("cancel", (call_id,)),
            ("time_remaining", (call_id,)),
            ("call_details", (call_id,)),
        ]:
            with pytest.raises(RuntimeError):
                getattr(front, name)(*args)
        # Metrics stay readable: the final counts are what people log.
        assert front.metrics()["calls_started"] == 1


def test_is_active_raises_runtime_error_after_stop():
    """The issue: "After stop() has returned, per-call methods raise
    RuntimeError"; is_active is one of them."""
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"x", timeout=30)
        _, call_id, _, _, _ = next_event(front)
        stop_front(front)
        with pytest.raises(grpc.RpcError):
            fut.result(timeout=WAIT)
        with pytest.raises(RuntimeError):
            front.is_active(call_id)


def test_start_twice_and_start_after_stop_raise():
    front = NativeGrpcFront("127.0.0.1:0", METHODS)
    front.start()
    port = front.port
    with pytest.raises(RuntimeError):
        front.start()
    assert front.port == port
    stop_front(front)
    with pytest.raises(RuntimeError):
        front.start()


def test_stop_argument_checks():
    front = NativeGrpcFront("127.0.0.1:0", METHODS)
    front.start()
    try:
        with pytest.raises(ValueError):
            front.stop(-1)
        with pytest.raises(TypeError):
            front.stop("1")
    finally:
        stop_front(front, grace=0)


def test_stop_twice_is_harmless():
    front = NativeGrpcFront("127.0.0.1:0", METHODS)
    front.start()
    stop_front(front)
    try:
        stop_front(front, timeout=5)
    except RuntimeError:
        pass  # refusing a second stop is acceptable; hanging is not


def test_stop_before_start():
    front = NativeGrpcFront("127.0.0.1:0", METHODS)
    stop_front(front, timeout=5)
    assert run_with_timeout(lambda: front.recv_batch(1, 1), 5, "recv_batch") is None
    with pytest.raises(RuntimeError):
        front.start()


def test_unstarted_front_is_collected_quietly():
    for _ in range(20):
        NativeGrpcFront("127.0.0.1:0", METHODS)


def test_started_front_dropped_without_stop_does_not_crash():
    import gc

    def drop():
        front = NativeGrpcFront("127.0.0.1:0", METHODS)
        front.start()
        del front
        gc.collect()

    run_with_timeout(drop, 20, "dropping a started front")


# ---------------------------------------------------------------- bind errors


def test_bind_error_names_the_address():
    with serving() as s:
        address = f"127.0.0.1:{s.port}"
        other = NativeGrpcFront(address, METHODS)
        with pytest.raises(OSError) as info:
            other.start()
        assert address in str(info.value)
        assert other.port == 0
        # The failed front can be stopped quietly, and the first one still serves.
        stop_front(other, timeout=5)
        with s.channel() as ch:
            assert say(ch)(b"ok", timeout=WAIT) == b"ok"


def test_bind_error_on_port_used_by_another_socket():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        address = f"127.0.0.1:{sock.getsockname()[1]}"
        front = NativeGrpcFront(address, METHODS)
        with pytest.raises(OSError) as info:
            front.start()
        assert address in str(info.value)


def test_failed_start_can_be_retried_after_the_port_frees():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    front = NativeGrpcFront(f"127.0.0.1:{port}", METHODS)
    with pytest.raises(OSError):
        front.start()
    sock.close()
    try:
        front.start()
    except RuntimeError:
        pytest.skip("a front whose start failed can't be started again (acceptable)")
    try:
        assert front.port == port
    finally:
        stop_front(front)


def test_so_reuseport_lets_two_fronts_share_a_port():
    opts = [("grpc.so_reuseport", 1)]
    with serving(options=opts) as a:
        with serving(address=f"127.0.0.1:{a.port}", options=opts) as b:
            assert a.port == b.port
            with a.channel() as ch:
                assert say(ch)(b"shared", timeout=WAIT) == b"shared"


# ---------------------------------------------------------------- signals, leaks


CTRL_C_SCRIPT = r"""
import os, signal, sys, threading, time
# Python's own Ctrl+C handler, whatever the disposition inherited (a shell
# running the suite in the background makes children ignore SIGINT).
signal.signal(signal.SIGINT, signal.default_int_handler)
from pygrpc_native import NativeGrpcFront
front = NativeGrpcFront("127.0.0.1:0", [("/echo.Echo/Say", False)])
front.start()
threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
t0 = time.monotonic()
try:
    front.recv_batch(8)  # no timeout: only Ctrl+C ends it
    print("RESULT returned")
except KeyboardInterrupt:
    print("RESULT KeyboardInterrupt %.2f" % (time.monotonic() - t0))
front.stop()
"""


def test_ctrl_c_interrupts_recv_batch():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", CTRL_C_SCRIPT], capture_output=True, text=True, timeout=30)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT")]
    assert lines, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    words = lines[0].split()
    assert words[1] == "KeyboardInterrupt", lines[0]
    assert float(words[2]) < 3, f"Ctrl+C took {words[2]}s to interrupt recv_batch"
    assert proc.returncode == 0, proc.stderr


def test_start_stop_cycles_leak_no_file_descriptors():
    import os

    def open_fds():
        return len(os.listdir("/proc/self/fd"))

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc")

    def cycle():
        with serving() as s, s.channel() as ch:
            assert say(ch)(b"cycle", timeout=WAIT) == b"cycle"

    for _ in range(3):
        cycle()
    time.sleep(0.5)
    before = open_fds()
    for _ in range(30):
        cycle()
    time.sleep(0.5)
    after = open_fds()
    assert after - before < 10, f"open file descriptors grew from {before} to {after} over 30 start/stop cycles"


def test_stop_with_many_pending_calls_cancels_each_once():
    n_channels, per_channel = 5, 100
    with started_front() as front:
        channels = [
            grpc.insecure_channel(f"127.0.0.1:{front.port}", options=[("grpc.use_local_subchannel_pool", 1)])
            for _ in range(n_channels)
        ]
        try:
            futures = [say(ch).future(b"%d" % i, timeout=60) for ch in channels for i in range(per_channel)]
            total = n_channels * per_channel
            wait_until(lambda: front.metrics()["calls_started"] == total, timeout=30, what="all calls started")
            # Python takes some of the calls; the rest are still queued when
            # the stop cancels them all.
            seen = []
            while len(seen) < total // 2:
                seen.extend(front.recv_batch(total // 2 - len(seen), 5))
            took = stop_front(front, grace=None)
            assert took < 10
            events = []
            for _ in range(100):
                batch = front.recv_batch(1000, 1)
                if batch is None:
                    break
                events.extend(batch)
            else:
                pytest.fail("recv_batch never returned None")
            calls = [e[1] for e in seen]
            assert all(e[0] == EVENT_CALL for e in seen) and len(set(calls)) == total // 2
            cancels = [e[1] for e in events if e[0] == EVENT_CANCEL]
            assert [e for e in events if e[0] != EVENT_CANCEL] == [], "calls that ended unseen are never delivered"
            assert sorted(cancels) == sorted(calls), "every call Python took needs exactly one EVENT_CANCEL"
            for f in futures:
                with pytest.raises(grpc.RpcError):
                    f.result(timeout=WAIT)
            m = front.metrics()
            assert m["calls_active"] == 0
            assert m["calls_cancelled"] == total
        finally:
            for ch in channels:
                ch.close()
