"""Differential tests: grpcio's experimental handler hooks
(tests/test_server_diff_hooks.py) on grpc.aio.server() and
pygrpc_native.aio.server(), with non-coroutine handlers, which run in the
migration thread pool: grpc.aio doesn't read the hooks, and neither does
pygrpc_native.aio.server(). experimental_thread_pool and the health
servicer's Watch are in test_diff_hooks.py, run on both kinds of server."""

import grpc
import pytest

from diff.aio_harness import call_stream, method, same, setup_handlers, stream

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


def test_experimental_non_blocking_is_not_used():
    def setup(server, state):
        def behavior(req, ctx, send_response_callback=None):
            if send_response_callback is not None:
                send_response_callback(b"callback")
                send_response_callback(None)
                return None
            return iter([b"blocking"])

        behavior.experimental_non_blocking = True
        setup_handlers({"S": stream(behavior)})(server, state)

    ref = same(setup, lambda run: call_stream(run.channel, method("S")))
    assert ref.responses == (b"blocking",)


