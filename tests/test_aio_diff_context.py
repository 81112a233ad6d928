"""Differential tests: grpc.aio.ServicerContext on grpc.aio.server() and
pygrpc_native.aio.server() — client cancel and passed deadlines
(asyncio.CancelledError in the handler task), add_done_callback /
cancelled() / done(), and non-coroutine handlers, which run in
migration_thread_pool with the sync context. What the context tells both
kinds of handler alike (peer, auth, time remaining) is in
test_diff_context.py.

Handlers record what they see into run.state, which is compared with what
the client saw; every wait has a time limit.
"""

import asyncio
import contextvars
import threading
import time

import grpc
import grpc.aio
import pytest

from diff.aio_harness import (
    LOOPS,
    WAIT,
    both,
    call_stream,
    call_unary,
    describe,
    method,
    outcome_of,
    peer_shape,
    same,
    setup_handlers,
    stream,
    unary,
    wait_until_async,
)
from diff.harness import cancel_stream_once_entered, cancel_unary_once_entered

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


def _recorded(handlers):
    """A setup for {name: (kind, fn)} where fn(req, ctx, state) is a
    coroutine function (kind "unary") or an async generator function (kind
    "stream")."""

    def setup(server, state):
        out = {}
        for name, (kind, fn) in handlers.items():
            if kind == "unary":

                async def u(req, ctx, fn=fn):
                    return await fn(req, ctx, state)

                out[name] = unary(u)
            else:

                async def s(req, ctx, fn=fn):
                    async for item in fn(req, ctx, state):
                        yield item

                out[name] = stream(s)
        setup_handlers(out)(server, state)

    return setup


# -- time_remaining in a non-coroutine handler -------------------------------------


@pytest.mark.parametrize("timeout", [20, None], ids=["deadline", "no-deadline"])
def test_sync_handler_time_remaining(timeout):
    # A non-coroutine handler gets grpc.aio's context too: None without a
    # deadline (grpc.server()'s context gives a huge number instead).
    def setup(server, state):
        def handler(req, ctx):
            left = ctx.time_remaining()
            state.record("left", (type(left).__name__, None if left is None else round(left)))
            return b""

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        call_unary(run.channel, method("M"), timeout=timeout)
        return run.state.wait_for("left")

    ref = same(setup, scenario)
    assert ref == (("float", 20) if timeout else ("NoneType", None))


# -- cancelled(), done() and add_done_callback on a normal finish -------------------


def _callback_recorder(state, name="cb"):
    def callback(ctx):
        state.record(name, (ctx.cancelled(), ctx.done()))
        state.event(name).set()

    return callback


def test_done_callback_on_normal_finish():
    async def handler(req, ctx, state):
        ctx.add_done_callback(_callback_recorder(state))
        state.record("during", (ctx.cancelled(), ctx.done()))
        return b"done"

    def scenario(run):
        out = call_unary(run.channel, method("M"))
        run.state.event("cb").wait(WAIT)
        return out, run.state.wait_for("during"), run.state.wait_for("cb")

    ref = same(_recorded({"M": ("unary", handler)}), scenario)
    assert ref[0].responses == (b"done",) and ref[1] == (False, False)


def test_done_callback_on_stream_finish():
    async def handler(req, ctx, state):
        ctx.add_done_callback(_callback_recorder(state))
        yield b"a"
        state.record("during", (ctx.cancelled(), ctx.done()))

    def scenario(run):
        out = call_stream(run.channel, method("S"))
        run.state.event("cb").wait(WAIT)
        return out, run.state.wait_for("during"), run.state.wait_for("cb")

    ref = same(_recorded({"S": ("stream", handler)}), scenario)
    assert ref[1] == (False, False)


def test_done_callbacks_run_in_order_on_the_loop():
    async def handler(req, ctx, state):
        loop_thread = threading.get_ident()
        ctx.add_done_callback(lambda c: state.append("order", (1, threading.get_ident() == loop_thread)))
        ctx.add_done_callback(lambda c: state.append("order", (2, threading.get_ident() == loop_thread)))
        ctx.add_done_callback(lambda c: state.event("last").set())
        return b""

    def scenario(run):
        out = call_unary(run.channel, method("M"))
        return out, run.state.event("last").wait(WAIT), run.state.records.get("order")

    ref = same(_recorded({"M": ("unary", handler)}), scenario)
    assert ref[1:] == (True, [(1, True), (2, True)])


_SET_BY_HANDLER = contextvars.ContextVar("set_by_handler", default="unset")


def test_done_callbacks_run_outside_the_handlers_context():
    """grpc.aio runs done callbacks in the server's Context, not the
    handler's: a ContextVar the handler set reads its default there (ours
    ran them in the handler's Context)."""

    async def handler(req, ctx, state):
        _SET_BY_HANDLER.set("handler")
        ctx.add_done_callback(lambda c: state.record("seen", _SET_BY_HANDLER.get()))
        return b""

    def scenario(run):
        call_unary(run.channel, method("M"))
        return run.state.wait_for("seen")

    assert same(_recorded({"M": ("unary", handler)}), scenario) == "unset"


def test_failing_done_callback_stops_the_rest():
    # grpc.aio runs the callbacks in one try block: the first one that raises
    # ends the loop, the ones after it don't run.
    async def handler(req, ctx, state):
        ctx.add_done_callback(lambda c: state.append("order", 1))
        ctx.add_done_callback(lambda c: 1 / 0)
        ctx.add_done_callback(lambda c: state.append("order", 3))
        ctx.add_done_callback(lambda c: state.event("last").set())
        return b""

    def scenario(run):
        out = call_unary(run.channel, method("M"))
        return out, run.state.event("last").wait(1), run.state.records.get("order")

    ref = same(_recorded({"M": ("unary", handler)}), scenario)
    assert ref[1:] == (False, [1])


@pytest.mark.parametrize("failure", ["exception", "abort"])
def test_done_callback_after_failure(failure):
    async def handler(req, ctx, state):
        ctx.add_done_callback(_callback_recorder(state))
        if failure == "abort":
            try:
                await ctx.abort(SC.NOT_FOUND, "nf")
            finally:
                state.record("after abort", (ctx.cancelled(), ctx.done()))
        raise ValueError("boom")

    def scenario(run):
        out = call_unary(run.channel, method("M"))
        run.state.event("cb").wait(WAIT)
        after = run.state.wait_for("after abort") if failure == "abort" else None
        return out.brief(), after, run.state.wait_for("cb")

    same(_recorded({"M": ("unary", handler)}), scenario)


# -- client cancel and passed deadlines ---------------------------------------------


def _waiting_handlers():
    """Handlers that wait (bounded) to be cancelled and record what they saw:
    the exception in the handler task, cancelled()/done() while waiting and
    in the done callback."""

    async def wait_cancelled(ctx, state):
        ctx.add_done_callback(_callback_recorder(state))
        state.record("during", (ctx.cancelled(), ctx.done()))
        state.event("entered").set()
        try:
            await asyncio.sleep(WAIT)
            state.record("handler saw", "no cancellation")
        except asyncio.CancelledError:
            state.record("handler saw", "CancelledError")
            state.record("in handler after cancel", (ctx.cancelled(), ctx.done()))
            raise
        except BaseException as exc:
            state.record("handler saw", describe(exc))
            raise

    async def unary_handler(req, ctx, state):
        await wait_cancelled(ctx, state)
        return b"too late"

    async def stream_handler(req, ctx, state):
        yield b"first"
        await wait_cancelled(ctx, state)
        yield b"too late"

    async def write_handler(req, ctx, state):
        await ctx.write(b"first")
        await wait_cancelled(ctx, state)
        if False:  # noqa: SIM108 - keeps this an async generator for _recorded
            yield

    return _recorded(
        {"M": ("unary", unary_handler), "S": ("stream", stream_handler), "W": ("stream", write_handler)}
    )


def _server_side(state):
    """What the handler task got, and whether its done callback ran."""
    return state.wait_for("handler saw"), state.event("cb").wait(WAIT)


def _flags(state):
    """cancelled() and done(): while the call ran, in the handler right after
    the CancelledError, and in the done callback."""
    state.event("cb").wait(WAIT)
    return state.wait_for("during"), state.wait_for("in handler after cancel"), state.wait_for("cb")


def _cancel_unary(run):
    return cancel_unary_once_entered(run, method("M"))


def _cancel_stream(run, name):
    first, rest, call = cancel_stream_once_entered(run, method(name))
    return first, rest, outcome_of(call).code


@pytest.mark.parametrize("loop", LOOPS)
def test_client_cancel_unary(loop):
    def scenario(run):
        return (_cancel_unary(run), *_server_side(run.state))

    ref = same(_waiting_handlers(), scenario, loop=loop)
    assert ref == (True, "CancelledError", True)


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("style", ["S", "W"], ids=["async-generator", "write"])
def test_client_cancel_stream(style, loop):
    def scenario(run):
        return (*_cancel_stream(run, style), *_server_side(run.state))

    ref = same(_waiting_handlers(), scenario, loop=loop)
    assert ref == (b"first", "error", SC.CANCELLED, "CancelledError", True)


@pytest.mark.parametrize("loop", LOOPS)
def test_deadline_passes_unary(loop):
    def scenario(run):
        out = call_unary(run.channel, method("M"), timeout=0.3)
        return (out.brief(), *_server_side(run.state))

    ref = same(_waiting_handlers(), scenario, loop=loop)
    assert ref == ((SC.DEADLINE_EXCEEDED, "Deadline Exceeded"), "CancelledError", True)


def test_deadline_passes_stream():
    def scenario(run):
        out = call_stream(run.channel, method("S"), timeout=0.3)
        # The details race between the client's timer and the server's reset.
        return (out.code, out.responses, *_server_side(run.state))

    ref = same(_waiting_handlers(), scenario)
    assert ref == (SC.DEADLINE_EXCEEDED, (b"first",), "CancelledError", True)


# grpc.aio's cancelled() is "the status code is CANCELLED" and done() is "the
# status was sent": a client cancel or a passed deadline changes neither.


def test_cancelled_and_done_after_client_cancel():
    ref = same(_waiting_handlers(), lambda run: (_cancel_unary(run), _flags(run.state)))
    assert ref == (True, ((False, False), (False, False), (False, False)))


def test_cancelled_and_done_after_client_cancel_of_stream():
    ref = same(_waiting_handlers(), lambda run: (_cancel_stream(run, "S"), _flags(run.state)))
    assert ref[1] == ((False, False), (False, False), (False, False))


def test_cancelled_and_done_after_deadline():
    def scenario(run):
        call_unary(run.channel, method("M"), timeout=0.3)
        return _flags(run.state)

    ref = same(_waiting_handlers(), scenario)
    assert ref == ((False, False), (False, False), (False, False))


def test_cancelled_and_done_when_the_handler_swallows_the_cancel():
    # The handler swallows the CancelledError, polls cancelled() for a while
    # and returns a response nobody reads.
    async def handler(req, ctx, state):
        ctx.add_done_callback(_callback_recorder(state))
        state.event("entered").set()
        try:
            await asyncio.sleep(WAIT)
        except asyncio.CancelledError:
            pass
        became = await wait_until_async(ctx.cancelled, timeout=0.5)
        state.record("after swallowed cancel", (became, ctx.cancelled(), ctx.done()))
        return b"x"

    def scenario(run):
        _cancel_unary(run)
        run.state.event("cb").wait(WAIT)
        return run.state.wait_for("after swallowed cancel", 3), run.state.wait_for("cb")

    ref = same(_recorded({"M": ("unary", handler)}), scenario)
    assert ref == ((False, False, False), (False, True))


def test_cancelled_after_set_code_cancelled():
    # The one way grpc.aio's cancelled() becomes True: the handler's own code.
    async def handler(req, ctx, state):
        ctx.add_done_callback(_callback_recorder(state))
        ctx.set_code(SC.CANCELLED)
        state.record("during", (ctx.cancelled(), ctx.done()))
        return b""

    def scenario(run):
        out = call_unary(run.channel, method("M"))
        run.state.event("cb").wait(WAIT)
        return out.code, run.state.wait_for("during"), run.state.wait_for("cb")

    same(_recorded({"M": ("unary", handler)}), scenario)


# -- non-coroutine handlers: migration_thread_pool and the sync context --------------


def test_sync_handlers_run_in_the_pool():
    def setup(server, state):
        def unary_handler(req, ctx):
            state.record("unary thread", threading.current_thread().name.startswith("aio-diff-"))
            return b"sync:" + req

        def stream_handler(req, ctx):
            state.record("stream thread", threading.current_thread().name.startswith("aio-diff-"))
            yield b"a"
            yield b"b"

        setup_handlers({"M": unary(unary_handler), "S": stream(stream_handler)})(server, state)

    def scenario(run):
        return (
            call_unary(run.channel, method("M"), b"x"),
            call_stream(run.channel, method("S")),
            run.state.wait_for("unary thread"),
            run.state.wait_for("stream thread"),
        )

    ref = same(setup, scenario)
    assert ref[0].responses == (b"sync:x",) and ref[1].responses == (b"a", b"b") and ref[2:] == (True, True)


@pytest.mark.parametrize("how", ["positional", "keyword"])
def test_sync_handler_abort_with_trailing_metadata(how):
    """grpc.aio's sync context takes abort()'s trailing metadata, as its
    aio one does (ours raised TypeError: UNKNOWN at the client)."""

    def handler(req, ctx):
        if how == "positional":
            ctx.abort(SC.NOT_FOUND, "nf", (("x-t", "1"),))
        else:
            ctx.abort(SC.NOT_FOUND, "nf", trailing_metadata=(("x-t", "1"),))

    def setup(server, state):
        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        out = call_unary(run.channel, method("M"))
        return out.brief(), out.trailing_metadata

    ref = same(setup, scenario)
    assert ref == ((SC.NOT_FOUND, "nf"), (("x-t", "1"),))


@pytest.mark.parametrize("end", ["answer", "abort"])
def test_done_callback_reads_the_context_after_the_end(end):
    """A done callback reads the peer, the metadata and the time left, as
    grpc.aio's context still answers them (ours read "", () and 0.0)."""

    def setup(server, state):
        async def handler(req, ctx):
            ctx.add_done_callback(
                lambda c: state.record(
                    "read",
                    (
                        c.peer().split(":")[0],
                        [k for k, _ in c.invocation_metadata() if k == "x-who"],
                        4 < c.time_remaining() < 6,
                    ),
                )
            )
            if end == "abort":
                await ctx.abort(SC.NOT_FOUND, "nf")
            return b"ok"

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        outcome = outcome_of(run.channel.unary_unary(method("M")).future(b"", timeout=5, metadata=(("x-who", "me"),)))
        return outcome.code, run.state.wait_for("read")

    assert same(setup, scenario) == (SC.OK if end == "answer" else SC.NOT_FOUND, ("ipv4", ["x-who"], True))


def test_handler_reads_the_context_after_its_abort():
    """A coroutine that reads its context in a finally block after abort()
    (a log line, say) gets the call's metadata and time left, as on
    grpc.aio, first asked then; ours answered () and 0 once Go had ended
    the call."""

    def setup(server, state):
        async def handler(req, ctx):
            try:
                await ctx.abort(SC.NOT_FOUND, "nf")
            finally:
                await asyncio.sleep(0.05)
                state.record(
                    "read", ([k for k, _ in ctx.invocation_metadata() if k == "x-who"], 4 < ctx.time_remaining() < 6)
                )

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        outcome = outcome_of(run.channel.unary_unary(method("M")).future(b"", timeout=5, metadata=(("x-who", "me"),)))
        return outcome.code, run.state.wait_for("read")

    assert same(setup, scenario) == (SC.NOT_FOUND, (["x-who"], True))


def test_context_calls_after_the_call_was_answered():
    """A task the handler left running calls its context once the call is
    answered: set_compression() raises grpc.aio's RuntimeError (the answer
    sent the initial metadata), send_initial_metadata() its UsageError and
    abort() its ExecuteBatchError (a second status); ours took the first,
    worded the second otherwise and said "Abort already called!"."""

    def setup(server, state):
        async def handler(req, ctx):
            async def later():
                await asyncio.sleep(0.2)
                seen = []
                try:
                    ctx.set_compression(grpc.Compression.Gzip)
                    seen.append("compression set")
                except Exception as exc:  # noqa: BLE001
                    seen.append(describe(exc))
                try:
                    await ctx.send_initial_metadata((("k", "v"),))
                except Exception as exc:  # noqa: BLE001
                    seen.append(describe(exc))
                try:
                    await ctx.abort(SC.INTERNAL, "late")
                except Exception as exc:  # noqa: BLE001
                    seen.append(describe(exc))
                state.record("seen", seen)

            asyncio.ensure_future(later())
            return b"x"

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        return call_unary(run.channel, method("M")).code, run.state.wait_for("seen")

    assert same(setup, scenario) == (
        SC.OK,
        [
            "builtins.RuntimeError: Compression setting must be specified before sending initial metadata",
            "grpc._cython.cygrpc.UsageError: RPC already finished.",
            "grpc._cython.cygrpc.ExecuteBatchError: Failed grpc_call_start_batch: 1 with grpc_call_error value: 'GRPC_CALL_ERROR'",
        ],
    )


def test_done_callback_that_is_not_callable():
    """add_done_callback(None) raises grpc.aio's TypeError at once; ours took
    it, then failed calling it at the call's end, and the callbacks added
    after it never ran."""

    def setup(server, state):
        async def handler(req, ctx):
            try:
                ctx.add_done_callback(None)
            except TypeError as exc:
                state.record("raised", str(exc))
            ctx.add_done_callback(lambda c: state.record("ran", True))
            return b"x"

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        return call_unary(run.channel, method("M")).code, run.state.wait_for("raised"), run.state.wait_for("ran")

    assert same(setup, scenario) == (SC.OK, "the first argument must be callable", True)


def test_known_difference_sync_handler_abort_returns():
    """README, known differences: the spec says abort() in a non-coroutine
    handler returns instead of raising, and ours does; grpc.aio 1.85's sync
    context raises AbortError (its abort() waits for the coroutine's
    result). The client sees the same status either way."""

    def setup(server, state):
        def handler(req, ctx):
            try:
                result = ctx.abort(SC.PERMISSION_DENIED, "sync abort")
                state.record("abort", ("returned", result))
            except BaseException as exc:
                state.record("abort", ("raised", describe(exc)))
                raise
            return b"after abort"

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        return call_unary(run.channel, method("M")).brief(), run.state.wait_for("abort")[0]

    ref, ours = both(setup, scenario)
    assert ref == ((SC.PERMISSION_DENIED, "sync abort"), "raised")
    assert ours == ((SC.PERMISSION_DENIED, "sync abort"), "returned")


def test_known_difference_sync_stream_handler_abort_returns():
    # As above, inside a non-coroutine generator: ours returns (the spec),
    # sends nothing more and the client gets the abort's status. In grpc.aio
    # the abort races with the generator's own send (measured: it raises
    # AbortError or ExecuteBatchError GRPC_CALL_ERROR_TOO_MANY_OPERATIONS) and
    # the client mostly waits for its deadline.
    def setup(server, state):
        def handler(req, ctx):
            yield b"one"
            try:
                result = ctx.abort(SC.ABORTED, "sync stream abort")
                state.record("abort", ("returned", result))
            except BaseException:
                state.record("abort", ("raised",))
                raise
            yield b"two"

        setup_handlers({"S": stream(handler)})(server, state)

    def scenario(run):
        out = call_stream(run.channel, method("S"), timeout=1)
        return out.responses, out.brief(), run.state.wait_for("abort", 1)[0]

    ref, ours = both(setup, scenario)
    assert ref[0] == (b"one",) and ref[2] == "raised"
    assert ours == ((b"one",), (SC.ABORTED, "sync stream abort"), "returned")


def test_sync_handler_exception_and_status():
    def failing(req, ctx):
        raise ValueError("sync boom")

    def coded(req, ctx):
        ctx.set_code(SC.NOT_FOUND)
        ctx.set_details("sync nf")
        ctx.set_trailing_metadata((("x-sync", "1"),))
        return b"ignored"

    def none(req, ctx):
        return None

    def stream_failing(req, ctx):
        yield b"a"
        raise ValueError("sync stream boom")

    setup = setup_handlers(
        {"F": unary(failing), "C": unary(coded), "N": unary(none), "SF": stream(stream_failing)}
    )

    def scenario(run):
        return [call_unary(run.channel, method(m)) for m in "FCN"] + [call_stream(run.channel, method("SF"))]

    ref = same(setup, scenario)
    assert ref[0].brief() == (SC.UNKNOWN, "Unexpected <class 'ValueError'>: sync boom")
    assert ref[1].brief() == (SC.NOT_FOUND, "sync nf") and ref[2].responses == (b"",)


def test_sync_handler_context():
    # What grpc.aio's sync context offers: time_remaining, metadata, peer,
    # send_initial_metadata, add_callback (run once the handler returned).
    def setup(server, state):
        def handler(req, ctx):
            added = ctx.add_callback(lambda: state.event("callback").set())
            left = ctx.time_remaining()
            md = sorted((m.key, m.value) for m in ctx.invocation_metadata() if m.key.startswith("x-"))
            state.record("seen", (added, round(left), md, peer_shape(ctx.peer())))
            ctx.send_initial_metadata((("x-init", "sync"),))
            return b"ok"

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        out = call_unary(run.channel, method("M"), metadata=(("x-a", "1"),), timeout=20)
        return out, run.state.wait_for("seen", 1), run.state.event("callback").wait(1)

    ref = same(setup, scenario)
    assert ref[0].initial_metadata == (("x-init", "sync"),)
    assert ref[1] == (None, 20, [("x-a", "1")], "ipv4:127.0.0.1:<port>") and ref[2] is True


def test_sync_handler_sends_initial_metadata_again():
    """grpc.aio's sync context runs its coroutine's check: a second
    send_initial_metadata() raises UsageError, in a unary handler and after
    a response stream's first message (ours raised grpc.server()'s
    ValueError). In a stream grpc.aio raises ExecuteBatchError instead
    when its core is still sending the first message (1 run in 3 here)."""

    def setup(server, state):
        def again(what):
            try:
                ctx_of[what].send_initial_metadata((("x-again", "2"),))
            except Exception as exc:  # noqa: BLE001 - what it raised is the outcome
                state.record(what, describe(exc))

        ctx_of = {}

        def unary_handler(req, ctx):
            ctx_of["unary"] = ctx
            ctx.send_initial_metadata((("x-init", "1"),))
            again("unary")
            return b"ok"

        def stream_handler(req, ctx):
            ctx_of["stream"] = ctx
            yield b"first"
            again("stream")
            yield b"second"

        setup_handlers({"M": unary(unary_handler), "S": stream(stream_handler)})(server, state)

    def scenario(run):
        return (
            call_unary(run.channel, method("M")).initial_metadata,
            call_stream(run.channel, method("S")).responses,
            run.state.wait_for("unary"),
            run.state.wait_for("stream"),
        )

    already = "grpc._cython.cygrpc.UsageError: Send initial metadata failed: already sent"
    busy = "grpc._cython.cygrpc.ExecuteBatchError: Failed grpc_call_start_batch: 8 with grpc_call_error value: 'GRPC_CALL_ERROR_TOO_MANY_OPERATIONS'"
    ref, ours = both(setup, scenario)
    assert ref[:3] == ours[:3] == ((("x-init", "1"),), (b"first", b"second"), already)
    assert ref[3] in (already, busy) and ours[3] == already


@pytest.mark.parametrize("how", ["unary", "callback raises", "abort", "exception", "response stream"])
def test_sync_handler_callbacks(how):
    """grpc.aio runs a non-coroutine handler's add_callback callbacks on
    the loop once the handler has returned a unary response, before that is
    sent: one that raises fails the call (UNKNOWN, with its exception), as
    the handler's exception would; after an exception, an abort, or for a
    response stream it never runs them. Ours ran them once the call had
    ended, whatever its end."""

    def setup(server, state):
        def callback():
            state.append("callbacks", "ran")
            if how == "callback raises":
                raise ValueError("callback failed")

        def handler(req, ctx):
            ctx.add_callback(callback)
            if how == "abort":
                ctx.abort(SC.INTERNAL, "aborted")
            elif how == "exception":
                raise KeyError("handler failed")
            return b"answer"

        def streamer(req, ctx):
            ctx.add_callback(callback)
            yield b"one"

        if how == "response stream":
            setup_handlers({"S": stream(streamer)})(server, state)
        else:
            setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        if how == "response stream":
            out = call_stream(run.channel, method("S")).responses
        else:
            done = call_unary(run.channel, method("M"))
            out = (done.code, done.details if done.code != SC.OK else done.responses[0])
        time.sleep(0.3)
        return out, run.state.records.get("callbacks", [])

    expected = {
        "unary": ((SC.OK, b"answer"), ["ran"]),
        "callback raises": ((SC.UNKNOWN, "Unexpected <class 'ValueError'>: callback failed"), ["ran"]),
        "abort": ((SC.INTERNAL, "aborted"), []),
        "exception": ((SC.UNKNOWN, "Unexpected <class 'KeyError'>: 'handler failed'"), []),
        "response stream": ((b"one",), []),
    }[how]
    assert same(setup, scenario) == expected


def test_sync_handler_invalid_initial_metadata():
    """A non-coroutine handler's initial metadata that gRPC can't carry:
    grpc.aio's context raises its core's ExecuteBatchError (it sends through
    the loop, as a coroutine would), the call ends INTERNAL; ours raised
    ValueError."""

    def setup(server, state):
        def handler(req, ctx):
            try:
                ctx.send_initial_metadata((("Bad Key", "v"),))
            except Exception as exc:  # noqa: BLE001 - what the test observes
                state.record("raised", type(exc).__name__)
                raise
            return b"answer"

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        return call_unary(run.channel, method("M")).brief(), run.state.wait_for("raised")

    assert same(setup, scenario) == ((SC.INTERNAL, "Invalid metadata"), "ExecuteBatchError")


def test_sync_context_has_grpc_aio_methods():
    # Every method of grpc.aio's sync context is there (ours has more:
    # is_active, cancel, abort_with_status, code, details, trailing_metadata).
    def setup(server, state):
        def handler(req, ctx):
            state.record("methods", {m for m in dir(ctx) if not m.startswith("_")})
            return b""

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        call_unary(run.channel, method("M"))
        return run.state.wait_for("methods")

    ref, ours = both(setup, scenario)
    assert ref - ours == set()


def test_sync_handler_client_cancel():
    # The sync handler can't see the cancel in grpc.aio (no is_active()); it
    # finishes, and its add_callback callbacks are compared.
    def setup(server, state):
        def handler(req, ctx):
            ctx.add_callback(lambda: state.event("callback").set())
            state.event("entered").set()
            state.event("go on").wait(2)
            state.record("handler finished", True)
            return b"too late"

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        cancelled = _cancel_unary(run)
        time.sleep(0.1)
        run.state.event("go on").set()
        finished = run.state.wait_for("handler finished", 2)
        return cancelled, finished, run.state.event("callback").wait(0.5)

    same(setup, scenario)


def test_context_calls_after_the_deadline_passed():
    """A coroutine handler that catches the cancellation of a passed
    deadline, then sends initial metadata or aborts, and a non-coroutine
    handler that sends initial metadata after it: grpc.aio's sends fail
    with its core's ExecuteBatchError; ours returned, raised AbortError
    (as if the status had gone), and raised grpc.RpcError."""

    def setup(server, state):
        async def late(req, ctx):
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                pass
            seen = []
            for attempt in (lambda: ctx.send_initial_metadata((("k", "v"),)), lambda: ctx.abort(SC.INTERNAL, "late")):
                try:
                    await attempt()
                    seen.append("returned")
                except Exception as exc:  # noqa: BLE001
                    seen.append(type(exc).__name__)
            state.record("seen", seen)
            return b"x"

        def late_sync(req, ctx):
            # grpc.aio's sync context has no is_active(): the time left says it.
            time.sleep(ctx.time_remaining() + 0.2)
            try:
                ctx.send_initial_metadata((("k", "v"),))
                state.record("sync", "returned")
            except Exception as exc:  # noqa: BLE001
                state.record("sync", type(exc).__name__)
            return b"x"

        setup_handlers({"M": unary(late), "S": grpc.unary_unary_rpc_method_handler(late_sync)})(server, state)

    def scenario(run):
        codes = [call_unary(run.channel, method(m), timeout=0.3).code for m in ("M", "S")]
        return codes, run.state.wait_for("seen"), run.state.wait_for("sync")

    assert same(setup, scenario) == (
        [SC.DEADLINE_EXCEEDED] * 2,
        ["ExecuteBatchError", "ExecuteBatchError"],
        "ExecuteBatchError",
    )
