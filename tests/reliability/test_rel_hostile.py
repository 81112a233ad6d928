"""Hostile clients: connections that never finish the preface, rapid
reset, endless CONTINUATION, streams that never read, messages and metadata
over the limits, malformed frames. The server must keep serving everyone
else, bound its memory, and answer bad input as grpc.server() (limits) or
plain grpc-go (malformed frames) answers it. Each probe runs on the
grpcio control too, in the same test, and both are recorded for
docs/reliability.md (report.py).

How each bar was checked to fail (by breaking a server on purpose, not
committed): rapid reset, with grpc-go's stream context detached from the
front's call (go/front/grpcgo.go dispatch: context.WithoutCancel, a
transport that doesn't pass RST_STREAM on): 1,020 of 2,000 reset calls
ran their handler, over the 1 % bar (CPU: 177 µs per reset, grpcio's
level). Disabling only the event queue's drop of ended calls is not
enough: the front also ends a reset call before queueing it.
CONTINUATION: the current grpc-go transport itself, with well-formed
fields, reads ~13 MiB and grows its peak RSS by ~30 MiB, failing both
4 MiB bars (xfail below; NULs it refuses at once). Malformed frames:
grpcio's servers, run through the same comparison, differ from grpc-go in
13 and 14 of the 26 cases. Metrics invariant: see test_rel_limits.py.
"""

import pytest
import scale
from harness import CONTROL_OF, GRPC_GO, TRANSPORT, ServerProcess, metrics_broken, settled_metrics, record
from probes import (
    FILLERS,
    continuation_flood,
    idle_connections,
    ping_flood,
    over_limits,
    rapid_reset,
    raw_frames,
    stalled_streams,
    wide_stalled_streams,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# The native kinds; lowlevel shares server()'s Go front and adds nothing here.
SERVED = ("server", "aio")


def _start(kind):
    # A stalled stream holds its sync handler's thread (grpcio's too): keep
    # threads to spare for the live calls.
    return ServerProcess(kind, workers=2 * scale.current().stalled_streams + 8)


@pytest.fixture(scope="module", params=SERVED)
def server(request):
    with _start(request.param) as s:
        yield s
        assert s.alive(), f"{s.label} died during the hostile probes"


@pytest.fixture(scope="module")
def control(server):
    """server's grpcio control, probed alongside it."""
    with _start(CONTROL_OF[server.kind]) as c:
        yield c


def _both(section, probe, server, control):
    """probe on server and its control, both recorded."""
    ours, theirs = probe(server), probe(control)
    record(section, server, ours)
    record(section, control, theirs)
    return ours, theirs


def test_idle_connections_do_not_starve_live_calls(server, control):
    f, _ = _both("Idle connections", lambda s: idle_connections(s, scale.current()), server, control)
    assert f["live_p99_ms"] < 2000, (TRANSPORT, f)


def test_rapid_reset_runs_few_handlers_and_keeps_serving(server, control):
    f, c = _both("Rapid reset", lambda s: rapid_reset(s, scale.current()), server, control)
    # Every call here is whole (its request and END_STREAM) before its
    # reset: a server that starts handlers for reset calls runs most of
    # them (grpcio's servers run none, ours 0-1 of 2,000).
    assert f["handlers_run"] <= max(c["handlers_run"], f["streams_reset"] // 100), (TRANSPORT, f, c)
    # ~30 µs per reset call for ours, 100-200 µs for grpcio's servers.
    assert f["cpu_us_per_reset"] <= max(c["cpu_us_per_reset"], 100), (TRANSPORT, f, c)
    assert f["live_call_s"] < 5, (TRANSPORT, f)
    m = settled_metrics(server)
    assert metrics_broken(m) == [], (TRANSPORT, m)


@pytest.mark.parametrize("filler", FILLERS)
def test_endless_continuation_is_cut_off(server, control, filler, request):
    if filler == "fields" and TRANSPORT == "grpcgo":
        # Measured: ours read ~13 MiB of well-formed fields before closing,
        # peak RSS +30 MiB (grpc.server(): all 64 MiB, +77 MiB).
        request.applymarker(pytest.mark.xfail(strict=True, reason=(
            "grpc-go's transport decodes and keeps a header block up to its 16 MiB header list limit "
            "(go/front/grpcgo.go transportHeaderListLimit) before the front's per-call metadata limit applies")))
    f, _ = _both(f"CONTINUATION flood ({filler})", lambda s: continuation_flood(s, filler), server, control)
    assert f["server_closed_connection"], (TRANSPORT, f)
    # Ours close after ~160 KiB of NULs and keep nothing. With the client's
    # send buffer at 64 KiB, a transport that buffers a header block up to
    # 16 MiB fails both bounds (checked: grpc-go's transport with its 16 MiB
    # header list limit does, on well-formed fields).
    assert f["sent_kib"] < 4 << 10, (TRANSPORT, f)
    assert f["rss_peak_growth_kib"] < 4 << 10, (TRANSPORT, f)
    assert f["live_call_s"] < 5, (TRANSPORT, f)


def test_streams_that_never_read_hold_bounded_memory(server, control):
    f, c = _both("Stalled streams", lambda s: stalled_streams(s, scale.current()), server, control)
    # The flow-control window (64 KiB) plus buffers, per stream.
    assert f["rss_kib_per_stream"] < 1024, (TRANSPORT, f)
    # Stalled streams cost next to nothing while they stay stalled: at the
    # short scale aio.server() ~2 ms of CPU per second, grpcio's ~5,
    # server() ~60 (its monitor looks at the tasks the stalled handlers hold
    # every 2 ms). A sender that spins uses a core or more: aio.server()
    # used 950-2,000 while it was told of room that wasn't there.
    assert f["cpu_ms_per_s_stalled"] <= max(2 * c["cpu_ms_per_s_stalled"], 250), (TRANSPORT, f, c)
    assert f["live_call_s"] < 5, (TRANSPORT, f)
    assert f["leaked_calls"] == 0, (TRANSPORT, f)


def test_streams_that_never_read_with_wide_windows_hold_bounded_memory(server, control):
    f, _ = _both("Stalled streams, wide windows", lambda s: wide_stalled_streams(s, scale.current()), server, control)
    # The h2 transport holds about 16 MiB for such a connection (Go's heap
    # may double it): it grew 485 MiB in the first second, and its
    # handler threads could freeze the process waiting on the socket with
    # the GIL held.
    assert f["rss_growth_mib"] < 64, (TRANSPORT, f)
    assert f["live_call_s"] < 5, (TRANSPORT, f)


def test_a_ping_flood_that_never_reads_holds_bounded_memory(server, control):
    f, _ = _both("PING flood, acks never read", lambda s: ping_flood(s, scale.current()), server, control)
    # The h2 transport queued acks up to its 32 MiB backlog bound (RSS +59
    # and +61 MiB here, 2.4 million PINGs read); it now stops reading once
    # 50 are owed, as grpc-go's transport does (RSS +5 to +8 MiB either
    # way, Go's heap included; grpc.server() +4).
    assert f["rss_growth_mib"] < 16, (TRANSPORT, f)
    assert f["live_call_s"] < 5, (TRANSPORT, f)


def test_over_limit_message_and_metadata_are_refused_as_grpc_server_does(server, control):
    ours, theirs = _both("Over the limits", over_limits, server, control)
    assert ours["message over 4 MiB"] == theirs["message over 4 MiB"] == "RESOURCE_EXHAUSTED"
    assert ours["metadata over 16 KiB"] != "OK", (TRANSPORT, ours)
    assert ours["live_call_s"] < 5


@pytest.fixture(scope="module")
def grpc_go_answers():
    with ServerProcess(GRPC_GO) as grpc_go:
        f = raw_frames(grpc_go)
        record("Malformed frames", grpc_go, f)
        return f["outcomes"]


# Where the h2 transport answers as RFC 9113 requires and grpc-go is lenient
# (go/front/framediff_test.go lists the same, frame by frame, in frameDiffOwn).
STRICTER_THAN_GRPC_GO = {
    "h2": {
        "DATA on a stream never opened": "RFC 9113 5.1: DATA on an idle stream is a connection error PROTOCOL_ERROR",
        "connection window past 2^31-1": "RFC 9113 6.9.1: a connection error FLOW_CONTROL_ERROR",
    }
}

# Where the h2 transport answers as grpcio's server does and grpc-go's
# differs (frameDiffOwn too): ours must then answer as the grpcio control.
AS_GRPCIO = {
    "h2": {
        "missing content-type": "grpcio serves a request whatever its content-type; grpc-go answers 415",
        "malformed grpc-timeout": "grpcio answers :status 200 and INTERNAL; grpc-go :status 400",
    }
}

# Where the h2 transport answers as grpc.server() does, grpc-go's differs and
# grpc.aio's server doesn't answer at all: ours must give that answer.
AS_GRPC_SERVER = {
    "h2": {
        "length prefix longer than the body": (
            "grpcio drops a message the half-close cuts short (a unary call then has none: UNIMPLEMENTED); "
            "grpc-go answers INTERNAL; grpc.aio's server leaves the call waiting",
            "status 12",
        ),
    }
}


def _answers_as(ours, grpc_go, grpcio, case):
    """A GOAWAY naming the error before the close, where grpc-go closes
    without one, answers no worse (RFC 9113 5.4.1: an endpoint SHOULD say
    why); so do the cases above."""
    if case in AS_GRPCIO.get(TRANSPORT, {}):
        return ours == grpcio
    if case in AS_GRPC_SERVER.get(TRANSPORT, {}):
        return ours == AS_GRPC_SERVER[TRANSPORT][case][1]
    if ours == grpc_go or case in STRICTER_THAN_GRPC_GO.get(TRANSPORT, {}):
        return True
    return grpc_go == "closed" and ours.startswith("goaway ")


def test_malformed_frames_are_answered_as_grpc_go_answers_them(server, control, grpc_go_answers):
    f, c = _both("Malformed frames", raw_frames, server, control)
    theirs = c["outcomes"]
    differ = {
        k: (v, grpc_go_answers[k], theirs[k])
        for k, v in f["outcomes"].items()
        if not _answers_as(v, grpc_go_answers[k], theirs[k], k)
    }
    assert not differ, f"{TRANSPORT}: (ours, grpc-go's, grpcio's) answers where they differ: {differ}"
    assert f["alive"] and f["live_call_s"] < 5, (TRANSPORT, f)
