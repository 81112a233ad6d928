"""metrics() counters move as calls start, end, fail and get refused."""

import grpc
import pytest

from pygrpc_native import EVENT_CALL, EVENT_CANCEL, NativeGrpcFront

from lowlevel_helpers import METHODS, WAIT, next_event, say, started_front, stop_front, wait_until

pytestmark = pytest.mark.timeout(60)

COUNTERS = [
    "calls_started",
    "calls_completed",
    "calls_cancelled",
    "calls_deadline_exceeded",
    "calls_refused",
    "batches_delivered",
    "events_delivered",
    "connections_total",
    "bytes_in",
    "bytes_out",
]


def test_fresh_front_metrics_are_zero():
    front = NativeGrpcFront("127.0.0.1:0", METHODS)
    try:
        assert all(v == 0 for v in front.metrics().values()), front.metrics()
        front.start()
        assert all(v == 0 for v in front.metrics().values()), front.metrics()
    finally:
        stop_front(front)


def test_metrics_follow_a_call():
    with started_front() as front:
        with grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
            fut = say(ch).future(b"m" * 1000, timeout=30)
            m = wait_until(lambda: (x := front.metrics())["events_queued"] == 1 and x, what="queued event")
            assert m["calls_started"] == 1
            assert m["calls_active"] == 1
            assert m["events_delivered"] == 0
            assert m["connections_active"] == 1
            assert m["connections_total"] == 1
            assert m["bytes_in"] >= 1000

            event = next_event(front)
            m = front.metrics()
            assert m["events_queued"] == 0
            assert m["events_delivered"] == 1
            assert m["batches_delivered"] == 1
            assert m["calls_active"] == 1
            assert m["calls_completed"] == 0

            out_before = m["bytes_out"]
            front.respond(event[1], b"r" * 5000)
            assert fut.result(timeout=WAIT) == b"r" * 5000
            m = wait_until(lambda: (x := front.metrics())["calls_completed"] == 1 and x, what="completion")
            assert m["calls_active"] == 0
            assert m["calls_started"] == 1
            assert m["calls_cancelled"] == 0
            assert m["bytes_out"] >= out_before + 5000
        # The client closed its channel: the connection goes away.
        wait_until(lambda: front.metrics()["connections_active"] == 0, what="connection to close")
        assert front.metrics()["connections_total"] == 1


def test_counters_never_go_down_and_gauges_settle():
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        snapshots = [front.metrics()]
        for i in range(20):
            fut = say(ch).future(b"%d" % i, timeout=30)
            e = next_event(front)
            front.respond(e[1], e[3])
            fut.result(timeout=WAIT)
            snapshots.append(front.metrics())
        for before, after in zip(snapshots, snapshots[1:]):
            for k in COUNTERS:
                assert after[k] >= before[k], (k, before[k], after[k])
        final = wait_until(lambda: (x := front.metrics())["calls_completed"] == 20 and x, what="20 completions")
        assert final["calls_started"] == 20
        assert final["calls_active"] == 0
        assert final["events_queued"] == 0
        assert final["events_delivered"] == 20
        assert 1 <= final["batches_delivered"] <= 20
        assert final["connections_total"] == 1


def test_refused_cancelled_and_deadline_counters():
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        # Unknown method: refused, never started.
        with pytest.raises(grpc.RpcError):
            ch.unary_unary("/echo.Echo/Nope")(b"", timeout=WAIT)
        m = front.metrics()
        assert m["calls_refused"] == 1
        assert m["calls_started"] == 0

        # Client cancel.
        fut = say(ch).future(b"c", timeout=30)
        e = next_event(front)
        fut.cancel()
        assert next_event(front, kind=EVENT_CANCEL)[1] == e[1]
        m = wait_until(lambda: (x := front.metrics())["calls_cancelled"] == 1 and x, what="cancel counted")
        assert m["calls_active"] == 0
        assert m["calls_deadline_exceeded"] == 0

        # Deadline (whether it counts as a deadline or a cancel is checked
        # by test_deadline_counter_counts_every_deadline).
        with pytest.raises(grpc.RpcError):
            say(ch)(b"d", timeout=0.3)
        e = next_event(front, kind=EVENT_CALL)
        assert next_event(front, kind=EVENT_CANCEL)[1] == e[1]
        m = wait_until(
            lambda: (x := front.metrics())["calls_deadline_exceeded"] + x["calls_cancelled"] == 2 and x,
            what="deadline counted",
        )
        assert m["calls_active"] == 0
        assert m["calls_started"] == 2
        assert m["calls_completed"] == 0
        assert m["calls_refused"] == 1


def test_connections_are_counted():
    with started_front() as front:
        # A local subchannel pool gives each channel its own connection.
        channels = [
            grpc.insecure_channel(f"127.0.0.1:{front.port}", options=[("grpc.use_local_subchannel_pool", 1)])
            for _ in range(3)
        ]
        try:
            for ch in channels:
                grpc.channel_ready_future(ch).result(timeout=WAIT)
            wait_until(lambda: front.metrics()["connections_active"] == 3, what="3 connections")
            assert front.metrics()["connections_total"] == 3
        finally:
            for ch in channels:
                ch.close()
        wait_until(lambda: front.metrics()["connections_active"] == 0, what="connections to close")
        assert front.metrics()["connections_total"] == 3


def test_metrics_after_stop_count_the_cancelled_call():
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"x", timeout=30)
        next_event(front)
        stop_front(front, grace=0.1)
        with pytest.raises(grpc.RpcError):
            fut.result(timeout=WAIT)
        m = front.metrics()
        assert m["calls_started"] == 1
        assert m["calls_active"] == 0
        assert m["calls_cancelled"] == 1
        assert m["connections_active"] == 0


def test_deadline_counter_counts_every_deadline():
    """Calls Python never answers all end by their deadline: each one is
    counted in calls_deadline_exceeded, none as cancelled by the client."""
    n = 30
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        for _ in range(n):
            with pytest.raises(grpc.RpcError):
                say(ch)(b"d", timeout=0.2)
            next_event(front, kind=EVENT_CALL)
            next_event(front, kind=EVENT_CANCEL)
        m = front.metrics()
        assert m["calls_active"] == 0
        assert (m["calls_deadline_exceeded"], m["calls_cancelled"]) == (n, 0)
