"""metrics() counters move as calls start, end, fail and get refused."""

import random

import grpc
import pytest

from pygrpc_native import EVENT_CALL, EVENT_CANCEL, EVENT_LOOKUP, FALLBACK, NativeGrpcFront

from h2_raw import RawH2
from lowlevel_helpers import (
    METHODS,
    SAY,
    WAIT,
    next_event,
    next_events,
    say,
    serving,
    started_front,
    stop_front,
    wait_until,
)

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
        assert all(v == 0 for k, v in front.metrics().items() if k != "goroutines"), front.metrics()
        front.start()
        assert all(v == 0 for k, v in front.metrics().items() if k != "goroutines"), front.metrics()
        assert front.metrics()["goroutines"] > 0
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
        fut = say(ch).future(b"d", timeout=0.3)
        e = next_event(front, kind=EVENT_CALL)
        assert next_event(front, kind=EVENT_CANCEL)[1] == e[1]
        with pytest.raises(grpc.RpcError):
            fut.result()
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
    counted in calls_deadline_exceeded, none as cancelled by the client.

    The client is a raw HTTP/2 one that never resets a stream: a grpcio
    client resets each call when its own timer fires, which on a busy
    machine can reach the server before the server's timer (the server's
    clock starts when the headers arrive) and rightly counts as a cancel.
    """
    n = 30
    streams = range(1, 2 * n, 2)
    with started_front() as front, RawH2(front.port) as conn:
        for stream_id in streams:
            conn.unary(stream_id, SAY, b"d", timeout="200m")
        next_events(front, n, kind=EVENT_CALL)
        # Trailers with DEADLINE_EXCEEDED; or, where the front's timer ran
        # late on a busy machine, grpc-go's own reset at the deadline (None).
        ends = set(conn.statuses(streams).values())
        assert ends <= {str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0]), None}, ends
        m = wait_until(lambda: (x := front.metrics())["calls_active"] == 0 and x, what="calls to end")
        assert (m["calls_deadline_exceeded"], m["calls_cancelled"]) == (n, 0)


def _invariant_handler(front, event):
    """Answers by the request's first byte: b"a" answer, b"c" Python
    cancels, anything else is left unanswered (deadline or client cancel). Lookups of /x.X/Big* are
    routed to a new native method, /x.X/Relay* to the fallback, anything
    else is finished UNIMPLEMENTED by Python."""
    kind, call_id, _method_id, payload, _key = event
    if kind == EVENT_LOOKUP:
        path = payload.decode()
        if path.startswith("/x.X/Big"):
            front.route(call_id, front.add_method(path, False))
        elif path.startswith("/x.X/Relay"):
            front.route(call_id, FALLBACK)
        else:
            front.finish(call_id, grpc.StatusCode.UNIMPLEMENTED.value[0], "no such method")
    elif kind == EVENT_CALL:
        if payload[:1] == b"a":
            front.respond(call_id, payload)
        elif payload[:1] == b"c":
            front.cancel(call_id)


def test_started_calls_end_in_exactly_one_outcome_under_random_traffic(tmp_path):
    """calls_started == completed + cancelled + deadline_exceeded + active
    once traffic settles, for a random mix of every way a call can end:
    answered, cancelled by the client or by Python, deadline, request over
    the size limit (to a known method: refused; to a looked-up one: issue
    19 bug 3), lookups finished by Python or relayed to the fallback."""
    rng = random.Random(19)
    big = b"a" * 2048
    kinds = ["answer", "python_cancel", "deadline", "client_cancel", "big_known", "big_lookup", "finished", "relay"]
    plan = [rng.choice(kinds) for _ in range(120)]
    with serving(
        _invariant_handler,
        threads=2,
        resolve_unknown=True,
        fallback=f"unix://{tmp_path}/nobody.sock",
        options=[("grpc.max_receive_message_length", 1024)],
    ) as served, served.channel() as ch:
        futures = []
        for i, kind in enumerate(plan):
            if kind == "answer":
                futures.append(say(ch).future(b"a%d" % i, timeout=WAIT))
            elif kind == "python_cancel":
                futures.append(say(ch).future(b"c", timeout=WAIT))
            elif kind == "deadline":
                futures.append(say(ch).future(b"i", timeout=0.2))
            elif kind == "client_cancel":
                fut = say(ch).future(b"k%d" % i, timeout=WAIT)
                served.log.wait_call(b"k%d" % i)
                fut.cancel()
                futures.append(fut)
            elif kind == "big_known":
                futures.append(say(ch).future(big, timeout=WAIT))
            elif kind == "big_lookup":
                futures.append(ch.unary_unary(f"/x.X/Big{i}").future(big, timeout=WAIT))
            elif kind == "finished":
                futures.append(ch.unary_unary(f"/x.X/Gone{i}").future(b"", timeout=WAIT))
            else:
                futures.append(ch.unary_unary(f"/x.X/Relay{i}").future(b"", timeout=WAIT))
        for fut in futures:
            try:
                fut.result(timeout=2 * WAIT)
            except (grpc.RpcError, grpc.FutureCancelledError):
                pass
        m = wait_until(lambda: (x := served.front.metrics())["calls_active"] == 0 and x, what="calls to end")
        ended = m["calls_completed"] + m["calls_cancelled"] + m["calls_deadline_exceeded"]
        assert m["calls_started"] == ended, m
        assert m["calls_refused"] == plan.count("big_known"), m
        assert m["calls_proxied"] == plan.count("relay"), m
