"""Load and soak: calls at full speed for a while, with the server's RSS,
OS threads and goroutines sampled; none may keep growing once warm."""

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
    assert f["threads_growth_pct"] < 5, f
    assert f["goroutines_growth_pct"] < 5, f
