"""Load and soak: calls at full speed for a while, with the server's RSS,
OS threads and goroutines sampled; none may keep growing once warm (RSS
under 5 %, threads and goroutines by a handful at most)."""

import pytest
import scale
from harness import OURS, ServerProcess
from probes import load_soak

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.mark.parametrize("kind", OURS)
def test_memory_threads_and_goroutines_stay_flat_under_load(kind):
    with ServerProcess(kind) as server:
        f = load_soak(server, scale.current())
        assert server.alive()
    assert f["failed"] == 0, f
    assert f["calls"] > 0, f
    assert f["rss_growth_pct"] < 5, f
    # A leak grows with the calls (tens of thousands here); the runtimes add
    # a thread or a goroutine now and then (Go starts threads for blocking
    # calls), so a count, not 5 % of a number in the tens, is the bar.
    assert f["threads_added"] <= 4, f
    assert f["goroutines_added"] <= 10, f
