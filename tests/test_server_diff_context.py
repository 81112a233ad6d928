"""Differential tests: grpc.ServicerContext (is_active, callbacks,
cancellation, deadlines) on grpc.server() and pygrpc_native.server(). What
the context tells both kinds of handler alike (peer, auth, time remaining)
is in test_diff_context.py.

What the handler sees is recorded on the server side (run.state) and
compared along with what the client saw. Waits are bounded everywhere.
"""

import threading
import time

import grpc
import pytest

from diff.harness import (
    WAIT,
    both,
    cancel_stream_once_entered,
    cancel_unary_once_entered,
    call_stream,
    call_unary,
    method,
    outcome_of,
    same,
    setup_handlers,
    stream,
    unary,
    wait_until,
)

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


# -- peer ------------------------------------------------------------------------


def test_peer_is_stable_within_a_connection():
    def handler(req, ctx):
        return ctx.peer().encode()

    def scenario(run):
        a = call_unary(run.channel, method("M")).responses[0]
        b = call_unary(run.channel, method("M")).responses[0]
        return a == b, a.rsplit(b":", 1)[1].isdigit()

    assert same(setup_handlers({"M": unary(handler)}), scenario) == (True, True)


# -- is_active and add_callback on a normal finish ---------------------------------


def _callbacks_on_finish(run):
    """The handler adds a callback, the call ends normally; what the handler
    saw during the call and after it ended."""
    state = run.state
    out = call_unary(run.channel, method("M"), b"")
    ran = state.event("callback").wait(WAIT)
    ctx = state.wait_for("ctx")
    # After the callbacks ran the call is over: add_callback refuses.
    late = ctx.add_callback(lambda: state.record("late callback ran", True))
    time.sleep(0.05)
    return (
        out,
        state.wait_for("during"),
        ran,
        ctx.is_active(),
        late,
        state.records.get("late callback ran", False),
    )


def _setup_callbacks_on_finish(server, state):
    def handler(req, ctx):
        def callback():
            state.record("callback in handler thread", threading.get_ident() == handler_thread)
            state.event("callback").set()

        handler_thread = threading.get_ident()
        added = ctx.add_callback(callback)
        state.record("during", (ctx.is_active(), added))
        state.record("ctx", ctx)
        return b"done"

    setup_handlers({"M": unary(handler)})(server, state)


def test_is_active_and_add_callback_on_normal_finish():
    ref = same(_setup_callbacks_on_finish, _callbacks_on_finish)
    out, during, ran, active_after, late, late_ran = ref
    assert out.code == SC.OK and during == (True, True) and ran is True
    assert active_after is False and late is False and late_ran is False


def test_callback_runs_outside_the_handler_thread():
    # grpcio runs callbacks on its own thread once the call is over, not on
    # the pool thread that ran the handler.
    def scenario(run):
        call_unary(run.channel, method("M"), b"")
        run.state.event("callback").wait(WAIT)
        return run.state.wait_for("callback in handler thread")

    assert same(_setup_callbacks_on_finish, scenario) is False


def test_callbacks_run_while_the_pool_serves_the_next_call():
    """A handler takes a pooled resource (a connection) and gives it back in
    a callback; with one pool thread, the next call's handler waits for it.
    grpcio runs callbacks on its serving thread, so every call gets it; ours
    ran them in the pool, behind that waiting handler: each call after the
    first waited out its 2 s and failed."""

    def setup(server, state):
        connections = threading.BoundedSemaphore(1)

        def handler(req, ctx):
            if not connections.acquire(timeout=2):
                ctx.abort(SC.RESOURCE_EXHAUSTED, "no free connection")
            ctx.add_callback(connections.release)
            return req

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        outcomes = []
        for i in range(4):
            started = time.monotonic()
            out = call_unary(run.channel, method("M"), b"%d" % i, timeout=10)
            outcomes.append((out.code, time.monotonic() - started < 1.0))
        return outcomes

    assert same(setup, scenario, workers=1) == [(SC.OK, True)] * 4


def test_callbacks_run_outside_the_pool():
    """grpcio's serving thread runs callbacks, not a pool thread (a pool
    whose threads all serve calls would hold them up)."""

    def setup(server, state):
        def handler(req, ctx):
            ctx.add_callback(lambda: state.record("callback thread", threading.current_thread().name))
            return req

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        call_unary(run.channel, method("M"), b"")
        return run.state.wait_for("callback thread").startswith(f"diff-{run.kind}")

    assert same(setup, scenario) is False


def test_a_stream_ended_by_the_send_limit_runs_its_callbacks():
    """An endless response stream whose message is over
    grpc.max_send_message_length: grpcio ends the call RESOURCE_EXHAUSTED,
    closes the generator and runs the callbacks. Ours ended the call but
    never told the handler's side: the callbacks (an unsubscribe, a
    release) never ran, not even after stop(). grpcio closes the generator
    at the refused yield; ours then pulled one more message first."""

    def setup(server, state):
        def endless(request, ctx):
            ctx.add_callback(lambda: state.record("callback ran", True))
            more = 0
            try:
                yield b"a" * 20
                while True:
                    time.sleep(0.02)
                    more += 1
                    yield b"a"
            finally:
                state.record("generator closed", more)

        setup_handlers({"S": stream(endless)})(server, state)

    def scenario(run):
        out = call_stream(run.channel, method("S"), b"", timeout=5)
        return out.brief(), run.state.wait_for("callback ran"), run.state.wait_for("generator closed")

    ref, ours = both(setup, scenario, options=[("grpc.max_send_message_length", 10)])
    too_large = (SC.RESOURCE_EXHAUSTED, "SERVER: Sent message larger than max (20 vs. 10)")
    assert ours == (too_large, True, 0)
    # On a loaded machine grpcio's generator sometimes yields once more
    # before its refused send fails.
    assert ref in ((too_large, True, 0), (too_large, True, 1))


@pytest.mark.parametrize("end", ["answer", "abort", "client cancel"])
def test_callback_reads_the_context_after_the_end(end):
    """A callback (an access log) reads the peer, the metadata and the time
    left after the call's end, as grpcio's context still answers them
    (ours read "", () and 0.0)."""

    def setup(server, state):
        def handler(req, ctx):
            ctx.add_callback(
                lambda: state.record(
                    "read",
                    (
                        ctx.peer().split(":")[0],
                        [k for k, _ in ctx.invocation_metadata() if k == "x-who"],
                        4 < ctx.time_remaining() < 6,
                    ),
                )
            )
            if end == "abort":
                ctx.abort(SC.NOT_FOUND, "nf")
            if end == "client cancel":
                state.event("entered").set()
                wait_until(lambda: not ctx.is_active())
            return b"ok"

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        future = run.channel.unary_unary(method("M")).future(b"", timeout=5, metadata=(("x-who", "me"),))
        if end == "client cancel":
            run.state.event("entered").wait(WAIT)
            future.cancel()
        return run.state.wait_for("read")

    assert same(setup, scenario) == ("ipv4", ["x-who"], True)


def test_callbacks_run_in_order_and_survive_a_failing_one():
    def setup(server, state):
        def handler(req, ctx):
            ctx.add_callback(lambda: state.append("order", 1))
            ctx.add_callback(lambda: 1 / 0)
            ctx.add_callback(lambda: state.append("order", 3))
            ctx.add_callback(lambda: state.event("last").set())
            return b""

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        out = call_unary(run.channel, method("M"))
        return out, run.state.event("last").wait(WAIT), run.state.records.get("order")

    ref = same(setup, scenario)
    assert ref[1] is True and ref[2] == [1, 3]


@pytest.mark.parametrize("call_end", ["answered", "cancelled by the stop"])
def test_stop_is_over_once_the_callbacks_of_its_calls_have_run(call_end):
    """grpcio sets stop()'s event (and ends stop(None) and
    wait_for_termination()) once its calls' callbacks have run, so an
    application that exits then loses no cleanup; ours set it as the
    front stopped, with a slow callback still running (and killed at
    exit: its thread is a daemon)."""

    def setup(server, state):
        def handler(req, ctx):
            def callback():
                time.sleep(0.3)
                state.record("callback done", True)

            ctx.add_callback(callback)
            if call_end == "cancelled by the stop":
                state.event("entered").set()
                wait_until(lambda: not ctx.is_active())
            return b"ok"

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        if call_end == "answered":
            outcome = call_unary(run.channel, method("M")).brief()
            stopped = run.server.stop(1).wait(WAIT)
        else:
            future = run.channel.unary_unary(method("M")).future(b"", timeout=5)
            run.state.event("entered").wait(WAIT)
            stopped = run.server.stop(0.1).wait(WAIT)
            outcome = outcome_of(future).brief()
        return outcome, stopped, run.state.records.get("callback done", False)

    ref = same(setup, scenario)
    assert ref[1:] == (True, True), ref


def test_a_callback_that_raises_system_exit_leaves_the_others_running():
    """On ours a callback runs on the server's thread for them, where a
    SystemExit or KeyboardInterrupt can't end the application: it is
    logged as any failing callback, and the callbacks of the calls after
    it run. Ours ran none of them again (its thread had died, unnoticed).
    grpcio's serving thread dies of it and its server hangs: nothing to
    compare with."""
    from diff.harness import running

    def setup(server, state):
        def handler(req, ctx):
            if req == b"exit":
                ctx.add_callback(lambda: (_ for _ in ()).throw(SystemExit(3)))
            else:
                ctx.add_callback(lambda: state.append("ran", req))
            return b""

        setup_handlers({"M": unary(handler)})(server, state)

    with running("native", setup) as run:
        for request in (b"a", b"exit", b"b", b"c"):
            assert call_unary(run.channel, method("M"), request).brief() == (SC.OK, "")
        assert wait_until(lambda: run.state.records.get("ran") == [b"a", b"b", b"c"], timeout=WAIT)


def test_a_stream_ended_by_a_message_that_is_not_bytes_runs_its_callbacks():
    """A response stream yielding a str with no serializer: grpcio's call
    waits for its deadline, then runs the callbacks; ours answers at once
    (README: UNKNOWN, with the error) and never ran them."""

    def setup(server, state):
        def handler(req, ctx):
            ctx.add_callback(lambda: state.event("callback").set())
            yield "not bytes"
            yield b"more"

        setup_handlers({"S": stream(handler)})(server, state)

    def scenario(run):
        call_stream(run.channel, method("S"), b"", timeout=1)
        return run.state.event("callback").wait(WAIT)

    assert same(setup, scenario) is True


def test_callbacks_run_after_handler_exception():
    def setup(server, state):
        def handler(req, ctx):
            ctx.add_callback(lambda: state.event("cb").set())
            raise ValueError("boom")

        setup_handlers({"M": unary(handler)})(server, state)

    ref = same(setup, lambda run: (call_unary(run.channel, method("M")).brief(), run.state.event("cb").wait(WAIT)))
    assert ref == ((SC.UNKNOWN, "Exception calling application: boom"), True)


# -- client cancellation ------------------------------------------------------------


def _blocking_setup(streaming):
    """A handler that waits (bounded) until its call is no longer active and
    records what it saw; its callback records that it ran."""

    def setup(server, state):
        def wait_inactive(ctx):
            ctx.add_callback(lambda: state.event("callback").set())
            state.event("entered").set()
            went_inactive = wait_until(lambda: not ctx.is_active(), timeout=WAIT)
            state.record("went inactive", went_inactive)
            # Shorter than the test's own wait, so a callback that never runs
            # is recorded as False rather than missing.
            state.record("callback ran by then", state.event("callback").wait(2))

        def unary_handler(req, ctx):
            wait_inactive(ctx)
            return b"too late"

        def stream_handler(req, ctx):
            yield b"first"
            wait_inactive(ctx)
            yield b"too late"

        handlers = {"M": unary(unary_handler)} if not streaming else {"S": stream(stream_handler)}
        setup_handlers(handlers)(server, state)

    return setup


def test_client_cancel_unary():
    def scenario(run):
        return (
            cancel_unary_once_entered(run, method("M")),
            run.state.wait_for("went inactive"),
            run.state.wait_for("callback ran by then", WAIT + 5),
        )

    assert same(_blocking_setup(False), scenario) == (True, True, True)


def test_client_cancel_stream():
    def scenario(run):
        first, rest, call = cancel_stream_once_entered(run, method("S"))
        return (
            first,
            rest,
            outcome_of(call, ()).brief(),
            run.state.wait_for("went inactive"),
            run.state.wait_for("callback ran by then", WAIT + 5),
        )

    ref = same(_blocking_setup(True), scenario)
    assert ref[2][0] == SC.CANCELLED and ref[3:] == (True, True)


def test_time_remaining_once_the_client_cancelled():
    # grpcio's context keeps counting toward the deadline after a cancel;
    # ours read 0 once Go had let go of the call (Go now keeps the details
    # of the last calls that ended unanswered).
    def handler(req, ctx, state):
        state.event("entered").set()
        wait_until(lambda: not ctx.is_active())
        state.record("left", ctx.time_remaining())
        return b""

    def setup(server, state):
        setup_handlers({"M": unary(lambda req, ctx: handler(req, ctx, state))})(server, state)

    def scenario(run):
        return cancel_unary_once_entered(run, method("M")), run.state.wait_for("left")

    ref, ours = both(setup, scenario)
    assert ref[0] is True and 5 < ref[1] < 11  # the client rounds its timeout up
    assert ours[0] is True and 5 < ours[1] < 11


def test_deadline_exceeded_while_handler_waits():
    def scenario(run):
        out = call_unary(run.channel, method("M"), b"", timeout=0.3)
        return out, run.state.wait_for("went inactive"), run.state.wait_for("callback ran by then", WAIT + 5)

    ref = same(_blocking_setup(False), scenario)
    assert ref[0].brief() == (SC.DEADLINE_EXCEEDED, "Deadline Exceeded") and ref[1:] == (True, True)


def test_deadline_exceeded_stream():
    def scenario(run):
        out = call_stream(run.channel, method("S"), b"", timeout=0.3)
        return out, run.state.wait_for("went inactive"), run.state.wait_for("callback ran by then", WAIT + 5)

    # grpcio's details here race between the client's timer ("Deadline
    # Exceeded") and the server's reset ("Stream removed (Deadline
    # Exceeded)"), so they are left out of the comparison.
    ref = same(_blocking_setup(True), lambda run: _without_details(scenario(run)))
    assert ref[0] == (SC.DEADLINE_EXCEEDED, (b"first",)) and ref[1:] == (True, True)


def _without_details(result):
    out, *rest = result
    return ((out.code, out.responses), *rest)


def test_deadline_exceeded_handler_sleeps_then_returns():
    # The handler ignores the deadline, sleeps past it and answers anyway.
    def setup(server, state):
        def handler(req, ctx):
            time.sleep(0.5)
            state.record("active after sleep", ctx.is_active())
            state.record("time remaining after sleep", ctx.time_remaining() <= 0.01)
            return b"late"

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        out = call_unary(run.channel, method("M"), b"", timeout=0.2)
        return out, run.state.wait_for("active after sleep"), run.state.wait_for("time remaining after sleep")

    ref = same(setup, scenario)
    assert ref[0].code == SC.DEADLINE_EXCEEDED and ref[1] is False


def test_context_cancel():
    def setup(server, state):
        def handler(req, ctx):
            ctx.add_callback(lambda: state.event("cb").set())
            ctx.cancel()
            # Right after cancel() grpcio's is_active() may still say True
            # (it learns of the cancellation asynchronously): wait a little.
            state.record("inactive soon after cancel", wait_until(lambda: not ctx.is_active(), timeout=2))
            return b"after cancel"

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        out = call_unary(run.channel, method("M"))
        return out, run.state.wait_for("inactive soon after cancel"), run.state.event("cb").wait(WAIT)

    ref = same(setup, scenario)
    assert ref[0].code == SC.CANCELLED and ref[1:] == (True, True)


def test_is_active_is_false_right_after_cancel():
    """grpcio's cancel() ends is_active() at once (measured: every time);
    on pygrpc_native it said True until Go had applied the cancel (up to a
    millisecond; 5 calls in 5 on grpc-go's transport)."""

    def setup(server, state):
        def handler(req, ctx):
            ctx.cancel()
            state.append("active right after cancel", ctx.is_active())
            return b"after cancel"

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        codes = [call_unary(run.channel, method("M")).code for _ in range(5)]
        assert wait_until(lambda: len(run.state.records.get("active right after cancel", ())) == 5)
        return list(zip(codes, run.state.records["active right after cancel"]))

    ref, ours = both(setup, scenario)
    assert ours == [(SC.CANCELLED, False)] * 5, ours
    assert {code for code, _ in ref} == {SC.CANCELLED}


def test_context_cancel_in_stream():
    def handler(req, ctx):
        yield b"one"
        ctx.cancel()
        yield b"two"

    setup = setup_handlers({"S": stream(handler)})
    ref = same(setup, lambda run: call_stream(run.channel, method("S")))
    assert ref.code == SC.CANCELLED


def test_send_initial_metadata_after_client_cancel():
    # The call is gone: grpcio raises an RpcError the handler can see.
    def setup(server, state):
        def handler(req, ctx):
            state.event("entered").set()
            wait_until(lambda: not ctx.is_active(), timeout=WAIT)
            try:
                ctx.send_initial_metadata((("x", "1"),))
                seen = "no error"
            except Exception as exc:  # noqa: BLE001
                seen = ("RpcError" if isinstance(exc, grpc.RpcError) else type(exc).__name__, str(exc))
            state.record("seen", seen)
            return b""

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        cancel_unary_once_entered(run, method("M"))
        return run.state.wait_for("seen")

    ref = same(setup, scenario)
    assert ref[0] == "RpcError"


# -- grpcio's private attributes that libraries read ------------------------------


def _state_of(ctx):
    st = ctx._state
    return st.code, st.details, st.client, st.aborted, st.trailing_metadata, st.initial_metadata_allowed


def test_private_state_and_rpc_event_read_as_on_grpcio():
    """context._state and context._rpc_event are private to grpcio's
    context, yet py-grpc-prometheus and ddtrace read _state (code, details,
    client) and many interceptors take the method's name from
    _rpc_event.call_details: ours had neither, and py-grpc-prometheus
    failed every unary call (UNKNOWN "'ServicerContext' object has no
    attribute '_state'")."""

    def setup(server, state):
        def handler(req, ctx):
            before = _state_of(ctx)
            event = ctx._rpc_event
            details = event.call_details
            who = [tuple(m) for m in event.invocation_metadata if m[0] == "x-who"]
            left = details.deadline - time.time()
            state.record(
                "event",
                (details.method, details.host.rsplit(b":", 1)[0], who, left > 2**62 if req else round(left)),
            )
            ctx.set_code(SC.NOT_FOUND)
            ctx.set_details("no such thing")
            ctx.set_trailing_metadata((("k", "v"),))
            ctx.send_initial_metadata(())
            state.record("states", (before, _state_of(ctx)))
            try:
                ctx.abort(SC.FAILED_PRECONDITION, "stop")
            except Exception:  # noqa: BLE001 - grpcio's abort raises a bare Exception
                state.record("aborted", _state_of(ctx))
                raise

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        seen = []
        for request, timeout in ((b"", 20), (b"no deadline", None)):
            out = call_unary(run.channel, method("M"), request, timeout=timeout, metadata=[("x-who", "me")])
            seen.append((out.code, out.details, run.state.wait_for("event"), run.state.wait_for("states")))
            seen.append(run.state.wait_for("aborted"))
            run.state.records.clear()
        return seen

    ref = same(setup, scenario)
    trailing = (("k", "v"),)
    code, details, event, (before, after) = ref[0]
    assert (code, details) == (SC.FAILED_PRECONDITION, "stop")
    assert event == (method("M").encode(), b"127.0.0.1", [("x-who", "me")], 20)
    assert before == (None, None, "open", False, None, True)
    assert after == (SC.NOT_FOUND, b"no such thing", "open", False, trailing, False)
    assert ref[1] == (SC.FAILED_PRECONDITION, b"stop", "open", True, trailing, False)
    assert ref[2][2][3] is True  # no deadline: 2**63


@pytest.mark.parametrize("end", ["answer", "client cancel"])
def test_private_state_client_once_the_call_ended(end):
    """_state.client, which py-grpc-prometheus reads to count a cancelled
    call as CANCELLED: "closed" once the server answered, "cancelled" once
    the client cancelled before the answer."""

    def setup(server, state):
        def handler(req, ctx):
            state.event("entered").set()
            if end == "client cancel":
                wait_until(lambda: not ctx.is_active())
                state.record("client", ctx._state.client)
                return b""

            def later():
                state.event("answered").wait(WAIT)
                time.sleep(0.1)  # the server learns it
                state.record("client", ctx._state.client)

            threading.Thread(target=later, daemon=True).start()
            return b""

        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        if end == "client cancel":
            cancel_unary_once_entered(run, method("M"))
        else:
            call_unary(run.channel, method("M"), b"")
            run.state.event("answered").set()
        return run.state.wait_for("client")

    assert same(setup, scenario) == ("cancelled" if end == "client cancel" else "closed")


def test_private_state_client_closed_at_the_end_of_the_request_stream():
    """_state.client turns "closed" when the handler reads its request
    stream to the client's half-close, before the answer, as on grpcio
    (ours said "open" until the answer)."""

    def setup(server, state):
        def handler(requests, ctx):
            seen = [ctx._state.client]
            next(requests)
            seen.append(ctx._state.client)
            seen.append(len(list(requests)))
            seen.append(ctx._state.client)
            state.record("client", seen)
            return b""

        setup_handlers({"M": grpc.stream_unary_rpc_method_handler(handler)})(server, state)

    def scenario(run):
        run.channel.stream_unary(method("M"))(iter([b"a", b"b", b"c"]), timeout=WAIT)
        return run.state.wait_for("client")

    assert same(setup, scenario) == ["open", "open", 2, "closed"]


@pytest.mark.parametrize("kind", ["stream_stream", "stream_unary"])
def test_requests_after_the_handlers_own_cancel_raise(kind):
    """A request-streaming handler that cancels its call (as grpcio's
    cancellation example does) and reads on: grpcio's iterator raises at
    the next read. Ours handed out the messages already read ahead first
    on grpc-go's transport (28-49 of 49 here), whose cancel ends the call
    later."""

    def handler(requests, context):
        next(requests)
        time.sleep(0.3)  # the client's other messages arrive meanwhile
        context.cancel()
        read = 0
        try:
            for _ in requests:
                read += 1
            outcome = ("ended", read)
        except grpc.RpcError:
            outcome = ("raised", read)
        context.state.record("outcome", outcome)
        return iter(()) if kind == "stream_stream" else b""

    def setup(server, state):
        def bound(requests, context):
            context.state = state
            return handler(requests, context)

        make = getattr(grpc, f"{kind}_rpc_method_handler")
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("diff.Diff", {"M": make(bound)}),))

    def scenario(run):
        release = threading.Event()

        def requests():
            yield from (b"%d" % i for i in range(50))
            release.wait(5)

        try:
            if kind == "stream_stream":
                list(run.channel.stream_stream(method("M"))(requests(), timeout=10))
            else:
                run.channel.stream_unary(method("M")).future(requests(), timeout=10).result()
        except grpc.RpcError as err:
            code = err.code()
        else:
            code = None
        finally:
            release.set()
        return code, run.state.wait_for("outcome")

    assert same(setup, scenario) == (grpc.StatusCode.CANCELLED, ("raised", 0))


def test_a_stream_cancelled_by_its_handler_is_not_resumed():
    """After the handler's own cancel(), grpcio's send of the next response
    fails and the generator is let go, never resumed; ours resumed it once
    more about half the runs (the send is queued, the cancel applied a
    moment later)."""

    def setup(server, state):
        def handler(req, ctx):
            yield b"one"
            ctx.cancel()
            yield b"two"
            state.append("resumed", True)
            yield b"three"

        setup_handlers({"S": stream(handler)})(server, state)

    def scenario(run):
        codes = [call_stream(run.channel, method("S")).code for _ in range(10)]
        time.sleep(0.2)
        return codes, run.state.records.get("resumed", [])

    ref = same(setup, scenario)
    assert ref == ([SC.CANCELLED] * 10, [])
