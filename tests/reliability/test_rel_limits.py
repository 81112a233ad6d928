"""maximum_concurrent_rpcs under a burst, and the front's counters after a
storm of calls that end every way.

maximum_concurrent_rpcs: as many calls as grpcio's server (same limit, same
burst) run, the rest are refused as grpcio refuses them, and the places
are free again once the first calls end. Checked to fail by ignoring the
limit on purpose (pygrpc_native's server built with
maximum_concurrent_rpcs=None, not committed): all 10 calls ran.

The metrics invariant (Front.Metrics / metrics()): once the storm is over,
calls_started == completed + cancelled + deadline_exceeded + active, only
the Stats call is active, no event waits and only the Stats channel's
connection is open. Checked to fail by not counting cancelled calls
(metrics.go countOutcome, not committed).
"""

import pytest
import scale
from harness import CONTROL_OF, OURS, TRANSPORT, ServerProcess, metrics_broken, settled_metrics, record
from probes import call_storm, max_concurrent_rpcs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

LIMIT, CALLS = 4, 10


@pytest.mark.parametrize("kind", ("server", "aio"))
def test_maximum_concurrent_rpcs_refuses_as_grpcio_does(kind):
    results = {}
    for k in (kind, CONTROL_OF[kind]):
        with ServerProcess(k, max_rpcs=LIMIT) as server:
            results[k] = max_concurrent_rpcs(server, LIMIT, CALLS)
            record("maximum_concurrent_rpcs", server, results[k])
            m = settled_metrics(server)
            assert metrics_broken(m) == [], (TRANSPORT, m)
    ours, theirs = results[kind], results[CONTROL_OF[kind]]
    want = {"OK": LIMIT, "RESOURCE_EXHAUSTED": CALLS - LIMIT}
    assert theirs["first burst"] == want, theirs  # the control, as the bar assumes
    assert ours["first burst"] == ours["second burst"] == want, (TRANSPORT, ours)


@pytest.mark.parametrize("kind", OURS)
def test_metrics_add_up_after_a_storm(kind):
    with ServerProcess(kind) as server:
        f = call_storm(server, scale.current())
        f["metrics"] = m = settled_metrics(server)
        record("Metrics after a storm", server, f)
    assert metrics_broken(m) == [], (TRANSPORT, metrics_broken(m), m)
    assert m["calls_cancelled"] > 0 and m["calls_deadline_exceeded"] > 0 and m["calls_refused"] > 0, (TRANSPORT, m)
    assert f["client outcomes"].get("DEADLINE_EXCEEDED", 0) == 20, (TRANSPORT, f)
