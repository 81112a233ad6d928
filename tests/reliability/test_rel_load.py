"""Load and soak: calls at full speed for a while, with the server's RSS,
OS threads and goroutines sampled; none may keep growing once warm (RSS
under 5 %, threads and goroutines by a handful at most). grpcio's servers
run the same soak (their figures are recorded for docs/reliability.md)
and are held to the same RSS and thread bars."""

import pytest
import scale
from harness import OURS, TRANSPORT, ServerProcess, record
from probes import load_soak

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.mark.parametrize("kind", (*OURS, "grpc", "grpc_aio"))
def test_memory_threads_and_goroutines_stay_flat_under_load(kind):
    with ServerProcess(kind) as server:
        f = load_soak(server, scale.current())
        record("Load and soak", server, f)
        assert server.alive()
    assert f["failed"] == 0, (TRANSPORT, f)
    assert f["calls"] > 0, f
    assert f["rss_growth_pct"] < 5, (TRANSPORT, f)
    # A leak grows with the calls (tens of thousands here); the runtimes add
    # a thread or a goroutine now and then (Go starts threads for blocking
    # calls), so a count, not 5 % of a number in the tens, is the bar.
    assert f["threads_added"] <= 4, (TRANSPORT, f)
    if f["goroutines_added"] is not None:
        assert f["goroutines_added"] <= 10, (TRANSPORT, f)
