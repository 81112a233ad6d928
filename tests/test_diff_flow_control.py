"""Differential tests: HTTP/2 flow control as a client sees it, on both
kinds of server (tests/diff/flavours.py).

With ``grpc.http2.bdp_probe`` 0 grpcio keeps its receive windows fixed at
``grpc.http2.lookahead_bytes`` (64 KiB unless given), so a client can send
only that much, and a message, ahead of a handler that isn't reading (the
flow_control example in grpcio's repository shows it); with BDP probing
(the default) grpcio grows its windows as data flows.
"""

import time

import pytest

from diff import TRANSPORT
from diff.flavours import each_flavour, wait_event
from diff.harness import method

pytestmark = pytest.mark.timeout(60)

_MESSAGES = 100
_SIZE = 2000


@each_flavour
@pytest.mark.parametrize(
    "options,ahead",
    [
        ([("grpc.http2.bdp_probe", 0)], 33),
        ([("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 16384)], 9),
        ([("grpc.http2.lookahead_bytes", 16384), ("grpc.http2.bdp_probe", 0)], 9),
        ([], _MESSAGES),
    ],
    ids=["fixed-64k", "fixed-16k", "fixed-16k-given-first", "bdp-probing"],
)
def test_what_a_client_sends_ahead_of_a_handler_not_reading(flavour, options, ahead):
    """Messages of 2,000 bytes a client could send while the handler had
    not read any (a second): its windows' worth and one more (the window
    then comes back as the handler reads, and the call completes). Ours
    let a client send a whole MiB ahead whatever the options."""
    if TRANSPORT == "grpcgo" and ahead == 9:
        pytest.skip("grpc-go's transport takes no window under 64 KiB (README: server options)")
    if TRANSPORT == "grpcgo" and not options:
        pytest.skip("grpc-go's BDP probing starts at 64 KiB and grows a window only as the handler reads")

    def setup(server, state):
        async def handler(requests, ctx):
            await wait_event(state.event("counted"))
            n = 0
            async for _ in requests:
                n += 1
            return b"%d" % n

        flavour.handlers({"M": flavour.stream_unary(handler)})(server, state)

    def scenario(run):
        pulled = []

        def requests():
            for i in range(_MESSAGES):
                pulled.append(i)
                yield b"x" * _SIZE

        future = run.channel.stream_unary(method("M")).future(requests(), timeout=20)
        time.sleep(1.0)
        count = len(pulled)
        run.state.event("counted").set()
        return count, future.result()

    (ref, ref_done), (ours, done) = flavour.both(setup, scenario, options=options)
    assert ref_done == done == b"%d" % _MESSAGES
    assert abs(ref - ahead) <= 1, ref  # grpcio's, pinned
    assert abs(ours - ref) <= 1, (ref, ours)
