"""h2spec against server() and aio.server(): no failure that plain grpc-go
(bench/goserver, listed in h2spec_grpcgo_failures.txt by report.py) doesn't
also have, except the races README lists."""

import os

import h2spec
import pytest
import scale
from harness import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module", autouse=True)
def _installed():
    if h2spec.binary() is None:
        if os.environ.get("CI"):
            pytest.fail("h2spec is not installed (scripts/test.sh installs it)")
        pytest.skip("h2spec is not installed: run scripts/test.sh, or set PGN_H2SPEC")


# aio.server() shares server()'s HTTP/2 layer (the Go front): the short
# run checks one of them, the long run (and report.py) both.
@pytest.mark.parametrize("kind", ["server"] if scale.current() is scale.SHORT else ["server", "aio"])
def test_h2spec_fails_only_where_grpc_go_does(kind):
    with ServerProcess(kind) as server:
        found = h2spec.failures(server.port, timeout_s=1)
        extra = h2spec.confirmed(server.port, found - h2spec.grpc_go_failures())
        assert server.alive()
    assert extra <= h2spec.KNOWN_EXTRA, f"h2spec failures grpc-go doesn't have: {sorted(extra - h2spec.KNOWN_EXTRA)}"
