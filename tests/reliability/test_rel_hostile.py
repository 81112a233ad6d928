"""Hostile clients: connections that never finish the preface, rapid
reset, endless CONTINUATION, streams that never read, messages and metadata
over the limits, malformed frames. The server must keep serving everyone
else, bound its memory, and answer bad input as grpc.server() (limits) or
plain grpc-go (malformed frames) answers it."""

import pytest
import scale
from harness import CONTROL, GRPC_GO, ServerProcess
from probes import continuation_flood, idle_connections, over_limits, rapid_reset, raw_frames, stalled_streams

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# The native kinds; lowlevel shares server()'s Go front and adds nothing here.
SERVED = ("server", "aio")


@pytest.fixture(scope="module", params=SERVED)
def server(request):
    # A stalled stream holds its sync handler's thread (grpcio's too): keep
    # threads to spare for the live calls.
    with ServerProcess(request.param, workers=2 * scale.current().stalled_streams + 8) as s:
        yield s
        assert s.alive(), f"{request.param} died during the hostile probes"


def test_idle_connections_do_not_starve_live_calls(server):
    f = idle_connections(server, scale.current())
    assert f["live_p99_ms"] < 2000, f


def test_rapid_reset_runs_few_handlers_and_keeps_serving(server):
    f = rapid_reset(server, scale.current())
    assert f["live_call_s"] < 5, f
    assert f["handlers_run"] <= f["streams_reset"], f


def test_endless_continuation_is_cut_off(server):
    f = continuation_flood(server)
    assert f["server_closed_connection"], f
    assert f["sent_kib"] < 32 << 10, f
    assert f["live_call_s"] < 5, f


def test_streams_that_never_read_hold_bounded_memory(server):
    f = stalled_streams(server, scale.current())
    # The flow-control window (64 KiB) plus buffers, per stream.
    assert f["rss_kib_per_stream"] < 1024, f
    assert f["live_call_s"] < 5, f
    assert f["leaked_calls"] == 0, f


def test_over_limit_message_and_metadata_are_refused_as_grpc_server_does(server):
    ours = over_limits(server)
    with ServerProcess(CONTROL) as control:
        theirs = over_limits(control)
    assert ours["message over 4 MiB"] == theirs["message over 4 MiB"] == "RESOURCE_EXHAUSTED"
    assert ours["metadata over 16 KiB"] != "OK", ours
    assert ours["live_call_s"] < 5


@pytest.fixture(scope="module")
def grpc_go_answers():
    with ServerProcess(GRPC_GO) as grpc_go:
        return raw_frames(grpc_go)["outcomes"]


def test_malformed_frames_are_answered_as_grpc_go_answers_them(server, grpc_go_answers):
    f = raw_frames(server)
    assert f["outcomes"] == grpc_go_answers
    assert f["alive"] and f["live_call_s"] < 5, f
