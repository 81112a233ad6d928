"""Clients that vanish mid-call (RST_STREAM or TCP close; unary, server
streaming, bidi): no call leaks in metrics(), every callback
registered fires, memory returns near its baseline, and a live call is
answered promptly afterwards. grpc.server() is held to the same bar."""

import pytest
import scale
from harness import CONTROL, OURS, ServerProcess
from probes import disconnects

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.mark.parametrize("kind", (*OURS, CONTROL))
def test_clients_vanishing_mid_call_leave_nothing_behind(kind):
    with ServerProcess(kind) as server:
        f = disconnects(server, scale.current())
    if kind != "lowlevel":
        assert f["callbacks_registered"] > 0, f
    assert f["callbacks_missing"] == 0, f
    assert f["leaked_calls"] in (0, None), f
    assert f["live_call_s"] < 5, f
    # After a warm-up round: what a second, larger round leaves behind.
    assert f["rss_growth_pct"] < 15, f
