"""Differential tests: what the servicer context tells a handler about its
call (peer, auth context, time remaining), each scenario run on both kinds
of server (tests/diff/flavours.py). Callbacks, cancellation and deadlines
look different to sync and coroutine handlers (is_active() and add_callback
against CancelledError and add_done_callback): they are in
test_server_diff_context.py and test_aio_diff_context.py.
"""

import socket
import threading
import time

import grpc
import pytest

from diff import TRANSPORT
from diff.aio_harness import describe
from diff.flavours import each_flavour, sleep
from diff.harness import call_stream, call_unary, method, peer_shape
from h2_raw import Closed, RawH2, grpc_message, request_headers

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


# -- peer and auth ---------------------------------------------------------------


@each_flavour
@pytest.mark.parametrize(
    "address,host,expected",
    [
        ("[::]:0", "127.0.0.1", "ipv4:127.0.0.1:<port>"),
        ("[::]:0", "::1", "ipv6:%5B::1%5D:<port>"),
        ("127.0.0.1:0", "127.0.0.1", "ipv4:127.0.0.1:<port>"),
        ("[::1]:0", "::1", "ipv6:%5B::1%5D:<port>"),
    ],
    ids=["dual-stack-v4-client", "dual-stack-v6-client", "v4-only", "v6-only"],
)
def test_peer_format(flavour, address, host, expected):
    async def handler(req, ctx):
        return peer_shape(ctx.peer()).encode()

    setup = flavour.handlers({"M": flavour.unary(handler)})
    ref = flavour.same(setup, lambda run: call_unary(run.channel, method("M")), address=address, host=host)
    assert ref.responses == (expected.encode(),)


@each_flavour
def test_auth_context_and_peer_identities_insecure(flavour):
    async def handler(req, ctx, state):
        auth = ctx.auth_context()
        state.record("auth", (sorted((k, list(v)) for k, v in auth.items()), ctx.peer_identities(), ctx.peer_identity_key()))
        return b""

    ref = flavour.same(
        flavour.recording("M", handler),
        lambda run: (call_unary(run.channel, method("M")), run.state.wait_for("auth")),
    )
    assert ref[0].code == SC.OK
    assert ("transport_security_type", [b"insecure"]) in ref[1][0]


# -- time_remaining ---------------------------------------------------------------


def _seconds(left):
    """time_remaining() as compared: rounded, "huge" past ten years."""
    if left is None:
        return None
    return "huge" if left > 10 * 365 * 24 * 3600 else round(left)


@each_flavour
@pytest.mark.parametrize("timeout", [20, None], ids=["deadline", "no-deadline"])
def test_time_remaining(flavour, timeout):
    # Without a deadline the sync context gives a huge number, grpc.aio's None.
    async def handler(req, ctx, state):
        left = ctx.time_remaining()
        state.record("left", (type(left).__name__, _seconds(left)))
        return b""

    def scenario(run):
        call_unary(run.channel, method("M"), timeout=timeout)
        return run.state.wait_for("left")

    ref = flavour.same(flavour.recording("M", handler), scenario)
    assert ref == (("float", 20) if timeout else flavour.pick(sync=("float", "huge"), aio=("NoneType", None)))


@each_flavour
def test_time_remaining_decreases_in_unary_and_stream(flavour):
    async def unary_handler(req, ctx, state):
        first = ctx.time_remaining()
        await sleep(0.2)
        state.record("unary decreased", 0.15 < first - ctx.time_remaining() < 1.0)
        return b""

    async def stream_handler(req, ctx, state):
        first = ctx.time_remaining()
        yield b"a"
        await sleep(0.2)
        state.record("stream decreased", 0.15 < first - ctx.time_remaining() < 1.0)
        yield b"b"

    def setup(server, state):
        flavour.recording("M", unary_handler)(server, state)
        flavour.recording("S", stream_handler, streaming=True)(server, state)

    def scenario(run):
        unary_out = call_unary(run.channel, method("M"), timeout=10)
        stream_out = call_stream(run.channel, method("S"), timeout=10)
        return unary_out, stream_out, run.state.wait_for("unary decreased"), run.state.wait_for("stream decreased")

    ref = flavour.same(setup, scenario)
    assert ref[2:] == (True, True)


def _reset_after(conn, seconds):
    """(stream id, error code) of the first RST_STREAM the server sends
    within seconds; None if it sends none."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        try:
            frame = conn.receive(left)
        except (socket.timeout, Closed):
            return None
        if frame.kind == "rst":
            return frame.stream_id, frame.error_code
    return None


@each_flavour
def test_a_call_ends_at_its_deadline_not_before(flavour):
    """A call whose handler hasn't answered ends DEADLINE_EXCEEDED at the
    client's deadline (grpc-timeout 300m: the least of 3 calls takes 300 ms
    or more), then resets it (RST_STREAM NO_ERROR, though the client sent
    its whole request), as grpcio does. Ours ended it 20 ms early, and
    time_remaining() said so (a handler answering 15 ms before a 300 ms
    deadline failed DEADLINE_EXCEEDED). grpc-go's transport keeps that
    margin: it resets a call at its deadline, which reaches a client whose
    own timer hasn't fired yet as CANCELLED."""

    async def handler(req, ctx):
        await sleep(0.6)
        return b""

    def scenario(run):
        took, codes, resets = [], set(), set()
        for _ in range(3):
            with RawH2(run.port) as conn:
                # As gRPC clients: else Nagle may hold the request back
                # until the server's delayed ACK (up to 40 ms).
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.receive()  # the server's SETTINGS: the connection is up
                start = time.monotonic()
                conn.headers(1, request_headers(method("M"), timeout="300m"))
                conn.data(1, grpc_message(b""))
                codes |= set(conn.statuses([1]).values())
                took.append(time.monotonic() - start)
                resets.add(_reset_after(conn, 0.3))
        return codes, min(took) >= 0.298, resets

    ref, ours = flavour.both(flavour.handlers({"M": flavour.unary(handler)}), scenario)
    deadline_exceeded = {str(SC.DEADLINE_EXCEEDED.value[0])}
    assert ref == (deadline_exceeded, True, {(1, 0)})
    if TRANSPORT == "grpcgo":
        assert ours[:2] == (deadline_exceeded, False)
    else:
        assert ours == ref


@each_flavour
def test_time_remaining_once_the_deadline_has_passed(flavour):
    # A handler still running after its deadline reads grpcio's
    # max(deadline - now, 0): the int 0. A plain function, so that the aio
    # servers run it in their thread pool rather than cancel it.
    def setup(server, state):
        def handler(req, ctx):
            time.sleep(0.4)
            left = ctx.time_remaining()
            state.record("left", (type(left).__name__, left))
            return b""

        flavour.handlers({"M": flavour.unary(handler)})(server, state)

    def scenario(run):
        return call_unary(run.channel, method("M"), timeout=0.1).code, run.state.wait_for("left")

    assert flavour.same(setup, scenario) == (SC.DEADLINE_EXCEEDED, ("int", 0))


def test_contexts_have_grpcios_public_names():
    # A handler sees no name grpcio's context lacks (a non-coroutine handler
    # on aio.server() gets grpcio's sync context, a superset of grpc.aio's
    # one for such handlers).
    from grpc import _server
    from grpc._cython import cygrpc

    from pygrpc_native import _context as sync_context
    from pygrpc_native.aio import _context as aio_context

    def public(cls):
        return {name for name in dir(cls) if not name.startswith("_")}

    assert public(sync_context.ServicerContext) == public(_server._Context)
    assert public(aio_context.ServicerContext) == public(cygrpc._ServicerContext)
    assert public(cygrpc._SyncServicerContext) <= public(aio_context.SyncHandlerContext)


@each_flavour
def test_initial_metadata_sent_after_the_answer(flavour):
    """From a thread a plain-function handler left running, once the call
    was answered: grpc.server() ignores it, grpc.aio raises its UsageError
    (the handler runs in its migration thread pool). Ours raised
    grpc.RpcError on both."""

    def setup(server, state):
        def handler(req, ctx):
            def later():
                state.wait_for("answered")
                try:
                    ctx.send_initial_metadata((("late", "1"),))
                    state.record("late", "no error")
                except BaseException as exc:  # noqa: BLE001 - what it raised is the outcome
                    state.record("late", describe(exc))

            threading.Thread(target=later, daemon=True).start()
            return b"resp"

        flavour.handlers({"M": flavour.unary(handler)})(server, state)

    def scenario(run):
        out = call_unary(run.channel, method("M"))
        run.state.record("answered", True)
        return out.code, out.initial_metadata, run.state.wait_for("late")

    late = flavour.pick(sync="no error", aio="grpc._cython.cygrpc.UsageError: RPC already finished.")
    assert flavour.same(setup, scenario) == (grpc.StatusCode.OK, (), late)


# -- after the call ended -----------------------------------------------------------


@each_flavour
@pytest.mark.parametrize("end", ["cancel", "deadline"])
def test_context_of_a_call_that_ended_unanswered(flavour, end):
    """A handler still running after its client cancelled, or its deadline
    passed, reads the call's metadata, peer and time left from its context
    as grpcio's does, first asked then. Ours answered no metadata, no peer
    and 0 once the front had let go of the call. A plain function, so that
    the aio servers run it in their thread pool rather than cancel it.
    (grpcio's peer after a deadline is "" or the peer by timing: compared
    after a cancel only.)"""

    def setup(server, state):
        def handler(req, ctx):
            state.event("started").set()
            state.event("ended").wait(5)
            time.sleep(0.1)  # the servers learn it too
            md = [tuple(m) for m in ctx.invocation_metadata() if m[0] == "x-who"]
            # grpc.aio 1.85 crashes the process here (a segfault in peer()).
            peer = None if flavour.aio or end == "deadline" else ctx.peer()
            left = ctx.time_remaining()
            state.record("seen", (md, peer and peer_shape(peer), type(left).__name__, left and round(left)))
            return b""

        flavour.handlers({"M": flavour.unary(handler)})(server, state)

    def scenario(run):
        timeout = 0.3 if end == "deadline" else 20
        future = run.channel.unary_unary(method("M")).future(b"", timeout=timeout, metadata=[("x-who", "me")])
        assert run.state.event("started").wait(5)
        if end == "cancel":
            future.cancel()
        else:
            time.sleep(0.4)
        run.state.event("ended").set()
        return run.state.wait_for("seen")

    ref = flavour.same(setup, scenario)
    if end == "cancel":
        assert ref == ([("x-who", "me")], flavour.pick(sync="ipv4:127.0.0.1:<port>", aio=None), "float", 20)
    else:
        assert ref == ([("x-who", "me")], None, "int", 0)


def _read_later(ctx, state, peer=True):
    """Starts a thread that, once the client has its answer, reads what the
    context says of the call and records it as "seen"."""

    def later():
        state.event("answered").wait(5)
        md = [tuple(m) for m in ctx.invocation_metadata() if m[0] == "x-who"]
        state.record("seen", (md, peer_shape(ctx.peer()) if peer else None))

    threading.Thread(target=later, daemon=True).start()


@each_flavour
@pytest.mark.parametrize("kind", ["unary", "stream", "raises", "coroutine"])
def test_context_read_by_a_thread_after_the_answer(flavour, kind):
    """A thread the handler left running (an audit log, say) reads the
    call's metadata and peer once the call was answered, as on grpcio. Ours
    read no metadata and no peer: the front forgets an answered call.
    Plain functions (the aio servers run them in their thread pool), but
    "coroutine", a grpc.aio handler on the aio servers. (grpc.aio 1.85
    crashes the process in peer() then: compared on the sync servers.)"""
    peer = not flavour.aio

    def setup(server, state):
        def unary(req, ctx):
            _read_later(ctx, state, peer)
            if kind == "raises":
                raise ValueError("no")
            return b"resp"

        def stream(req, ctx):
            _read_later(ctx, state, peer)
            yield b"one"

        async def coroutine(req, ctx):
            _read_later(ctx, state, peer)
            return b"resp"

        handler = {"stream": flavour.stream(stream), "coroutine": flavour.unary(coroutine)}.get(kind)
        flavour.handlers({"M": handler or flavour.unary(unary)})(server, state)

    def scenario(run):
        call = call_stream if kind == "stream" else call_unary
        out = call(run.channel, method("M"), b"req", metadata=[("x-who", "me")])
        run.state.event("answered").set()
        return out.code, run.state.wait_for("seen")

    code = SC.UNKNOWN if kind == "raises" else SC.OK
    assert flavour.same(setup, scenario) == (code, ([("x-who", "me")], "ipv4:127.0.0.1:<port>" if peer else None))
