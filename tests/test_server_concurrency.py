"""Handlers run concurrently in the server's thread pool, as in grpcio:
calls that block do not hold up the calls behind them while pool threads
are free."""

import time

import pytest
from diff.harness import both, method, setup_handlers, unary

pytestmark = pytest.mark.timeout(60)


SLEEP = 1.0


def _sleepy(request, context):
    time.sleep(SLEEP)
    return request


@pytest.mark.parametrize("calls", [2, 4])
def test_blocking_handlers_run_side_by_side(calls):
    def scenario(run):
        call = run.channel.unary_unary(method("Sleep"))
        started = time.monotonic()
        pending = [call.future(b"%d" % i, timeout=10) for i in range(calls)]
        results = [f.result() for f in pending]
        return results, time.monotonic() - started

    (ref, ref_took), (ours, ours_took) = both(setup_handlers({"Sleep": unary(_sleepy)}), scenario, workers=4)
    assert ours == ref == [b"%d" % i for i in range(calls)]
    # Side by side: about one handler's time, not `calls` of them (the
    # margin is for a loaded 2-core machine).
    assert ref_took < SLEEP * calls - 0.4
    assert ours_took < SLEEP * calls - 0.4


def test_a_call_behind_a_slow_one_is_not_held_up():
    def setup(server, state):
        def handler(request, context):
            if request == b"slow":
                time.sleep(2)
            return request

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        call = run.channel.unary_unary(method("M"))
        slow = call.future(b"slow", timeout=10)
        time.sleep(0.2)  # the slow call is in its handler
        started = time.monotonic()
        fast = call(b"fast", timeout=10)
        took = time.monotonic() - started
        slow.result()
        return fast, took < 1.0

    (ref, ours) = both(setup, scenario, workers=4)
    assert ref == ours == (b"fast", True)
