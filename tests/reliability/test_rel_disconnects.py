"""Clients that vanish mid-call (RST_STREAM or TCP close; unary, server
streaming, bidi): no call leaks in metrics(), the front's counters add up
(every started call ended one way; no connection left open), every
callback registered fires, memory returns near its baseline, and a live
call is answered promptly afterwards. grpcio's servers are held to the
same bar, in the same run."""

import pytest
import scale
from harness import CONTROL, OURS, TRANSPORT, ServerProcess, metrics_broken, settled_metrics, record
from probes import disconnects

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.mark.parametrize("kind", (*OURS, CONTROL, "grpc_aio"))
def test_clients_vanishing_mid_call_leave_nothing_behind(kind):
    with ServerProcess(kind) as server:
        f = disconnects(server, scale.current())
        record("Disconnects", server, f)
        m = settled_metrics(server)
    assert metrics_broken(m) == [], (TRANSPORT, metrics_broken(m), m)
    if kind != "lowlevel":
        assert f["callbacks_registered"] > 0, f
    assert f["callbacks_missing"] == 0, (TRANSPORT, f)
    assert f["leaked_calls"] in (0, None), (TRANSPORT, f)
    assert f["live_call_s"] < 5, (TRANSPORT, f)
    # After a warm-up round: what three more rounds leave behind (the smallest of their RSS).
    assert f["rss_growth_pct"] < 15, (TRANSPORT, f)
