"""Differential tests: request streams. Client-streaming (stream_unary) and
bidi (stream_stream) methods, each scenario written once (tests/diff/streams.py)
and run for both kinds of method on both kinds of server
(tests/diff/flavours.py): request counts, handlers that end early, abort,
exceptions, status and trailers, client cancel, deadlines, ping-pong,
message size limits both ways, compression, interceptors, what the context
tells a stream handler (peer, user-agent, time remaining), headers sent
before the client finishes, concurrent streams, failing deserializers.
Scenarios only grpc.aio can express (read(), write(), done callbacks) are
in test_aio_diff_streams.py; TLS identity in stream handlers in
test_tls_streams.py; maximum_concurrent_rpcs in
test_diff_max_concurrent_rpcs.py.

A client that keeps sending while the server acts comes from a generator
(streams.endless / streams.gated); what the handler observed is recorded
into run.state and compared alongside what the client saw.
"""

import threading
import time
from concurrent import futures

import grpc
import pytest

from diff import TRANSPORT, streams
from diff.compression import BODY
from diff.flavours import each_flavour, each_flavour_and_uvloop, each_loop, sleep
from diff.harness import WAIT, method, peer_shape
from diff.streams import each_kind
from diff.wiretap import WireTap
from h2_raw import RawH2, grpc_message, request_headers
from hyperframe.frame import WindowUpdateFrame

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


async def _echo(requests, ctx, state):
    """Echoes each request, then says how many came in a trailer."""
    n = 0
    async for r in requests:
        n += 1
        yield b"e:" + r
    ctx.set_trailing_metadata((("x-count", str(n)),))


def _joined(kind, items):
    """What the client receives for items yielded by a body (streams.handler)."""
    return (b",".join(items),) if kind == "stream_unary" else tuple(items)


# -- request counts ------------------------------------------------------------------


@each_flavour_and_uvloop
@each_kind
@pytest.mark.parametrize("count", [0, 1, 300])
def test_request_count(flavour, kind, count):
    requests = streams.numbered(count, size=20)
    setup = streams.serving(flavour, kind, {"M": _echo})
    ref = flavour.same(setup, lambda run: streams.call(run.channel, kind, method("M"), requests))
    assert ref.code == SC.OK and ref.trailing_metadata == (("x-count", str(count)),)
    assert ref.responses == _joined(kind, [b"e:" + r for r in requests])


@each_flavour
@each_kind
def test_large_messages_in_both_directions(flavour, kind):
    requests = [bytes([i]) * (512 * 1024) for i in range(6)]
    setup = streams.serving(flavour, kind, {"M": _echo})
    ref = flavour.same(setup, lambda run: streams.call(run.channel, kind, method("M"), requests, timeout=20))
    assert ref.code == SC.OK and ref.trailing_metadata == (("x-count", "6"),)


def _end_of(raw, sid, timeout):
    """What a raw client received on stream sid until its end: the answers'
    bytes, grpc-status, grpc-message and the x-count trailer."""
    frames = raw.collect(lambda fs: any(f.stream_id == sid and f.end_stream for f in fs), timeout)
    data = b"".join(f.data for f in frames if f.kind == "data" and f.stream_id == sid)
    last = [f.headers for f in frames if f.kind == "headers" and f.stream_id == sid][-1]
    return data, last.get("grpc-status"), last.get("grpc-message"), last.get("x-count")


@each_flavour
@pytest.mark.parametrize("kind", ["unary"] + list(streams.KINDS))
def test_a_message_cut_short_by_the_half_close_is_no_message(flavour, kind):
    """A client that half-closes inside a message (its length prefix says
    100 bytes, 3 follow): grpcio drops what came of it, so a unary call
    has no request (UNIMPLEMENTED, "requires exactly one request
    message") and a request stream just ends after its whole messages.
    The default transport ended the call INTERNAL."""

    async def echo(request, ctx):
        return request

    def setup(server, state):
        if kind == "unary":
            flavour.handlers({"M": flavour.unary(echo)})(server, state)
        else:
            streams.serving(flavour, kind, {"M": _echo})(server, state)

    def scenario(run):
        whole = b"" if kind == "unary" else grpc_message(b"ok")
        with RawH2(run.port) as raw:
            raw.headers(1, request_headers(method("M")))
            raw.data(1, whole + grpc_message(b"abc", declared_length=100))
            try:
                return _end_of(raw, 1, timeout=3)
            except AssertionError:
                return "no end"

    ref, ours = flavour.both(setup, scenario)
    if TRANSPORT == "grpcgo":
        # grpc-go's transport reads the cut as grpc-go does (README).
        assert ours == (b"", "13", "unexpected EOF", None), ours
    elif kind == "unary":
        no_request = (b"", "12", f'"{method("M").encode()!r}" requires exactly one request message.', None)
        assert ours == no_request
        # grpc.aio.server() never ends such a call (until its deadline).
        assert ref == ("no end" if flavour.aio else no_request), ref
    else:
        assert ours == ref and ref[1:] == ("0", "", "1"), (ref, ours)


# -- handlers that end the call while the client still sends ---------------------------


@each_flavour
@each_kind
@pytest.mark.parametrize("read", [0, 3])
def test_handler_returns_while_client_sends(flavour, kind, read):
    async def early(requests, ctx, state):
        got = []
        if read:
            async for r in requests:
                got.append(r)
                if len(got) == read:
                    break
        state.record("got", got)
        yield b"early:" + b"|".join(got)

    def scenario(run):
        out = streams.call(run.channel, kind, method("M"), streams.endless(0.005, limit=3))
        return out, run.state.wait_for("got")

    ref = flavour.same(streams.serving(flavour, kind, {"M": early}), scenario)
    assert ref[0].code == SC.OK and ref[1] == streams.numbered(read)


@each_flavour
@each_kind
def test_abort_after_messages_with_trailers(flavour, kind):
    async def abort_at_two(requests, ctx, state):
        n = 0
        async for r in requests:
            n += 1
            if kind == "stream_stream":
                yield b"e:" + r
            if n == 2:
                ctx.set_trailing_metadata((("x-seen", "2"), ("x-seen-bin", b"\x00\xff\x01")))
                await ctx.abort(SC.INVALID_ARGUMENT, "stopped at 2 ü")

    def scenario(run):
        return streams.call(run.channel, kind, method("M"), streams.endless(0.005, limit=3))

    ref = flavour.same(streams.serving(flavour, kind, {"M": abort_at_two}), scenario)
    assert ref.brief() == (SC.INVALID_ARGUMENT, "stopped at 2 ü")
    assert ref.trailing_metadata == (("x-seen", "2"), ("x-seen-bin", b"\x00\xff\x01"))


@each_flavour
@each_kind
def test_status_details_and_binary_trailers_after_messages(flavour, kind):
    async def set_after(requests, ctx, state):
        await ctx.send_initial_metadata((("x-init", "1"), ("x-init-bin", b"\x01\x02")))
        async for r in requests:
            yield b"e:" + r
        ctx.set_code(SC.NOT_FOUND)
        ctx.set_details("gone after messages ü")
        ctx.set_trailing_metadata((("x-t", "a"), ("x-t", "b"), ("x-t-bin", b"\xff\x00")))

    def scenario(run):
        return streams.call(run.channel, kind, method("M"), streams.numbered(3))

    ref = flavour.same(streams.serving(flavour, kind, {"M": set_after}), scenario)
    assert ref.brief() == (SC.NOT_FOUND, "gone after messages ü")
    assert ref.initial_metadata == (("x-init", "1"), ("x-init-bin", b"\x01\x02"))
    assert ref.trailing_metadata == (("x-t", "a"), ("x-t", "b"), ("x-t-bin", b"\xff\x00"))


@each_flavour
@each_kind
def test_handler_exception_after_a_message(flavour, kind):
    async def fail(requests, ctx, state):
        async for r in requests:
            yield b"e:" + r
            raise ValueError("stream boom")

    def scenario(run):
        return streams.call(run.channel, kind, method("M"), streams.endless(0.005, limit=3))

    ref = flavour.same(streams.serving(flavour, kind, {"M": fail}), scenario)
    details = flavour.pick(sync="Exception iterating responses: stream boom", aio="Unexpected <class 'ValueError'>: stream boom")
    if kind == "stream_unary":
        details = flavour.pick(sync="Exception calling application: stream boom", aio=details)
    assert ref.brief() == (SC.UNKNOWN, details)


# -- client cancel and deadlines --------------------------------------------------------


async def _observe_end(requests, ctx, state, flavour):
    """Reads requests (setting "entered" after the second one) and records
    how reading ended ("ended": how, and the count read), then whether the
    call still looks active ("active"): is_active() on the sync servers; on
    grpc.aio's, whether the handler's task goes on past its next await."""
    n = 0
    how = "end"
    try:
        async for _ in requests:
            n += 1
            if n == 2:
                state.event("entered").set()
    except BaseException as exc:  # noqa: BLE001 - how it ended is the observation
        how = streams.describe(exc)
        raise
    finally:
        state.record("ended", (_STOPPED.get(how, how), n))
        if how == "CancelledError":
            state.record("active", False)
        elif flavour.aio:
            # grpc.aio cancels the handler's task: its next await raises.
            try:
                await sleep(1.0)
                state.record("active", True)
            except BaseException:  # noqa: BLE001
                state.record("active", False)
                raise
        else:
            await sleep(0.05)  # grpcio's context knows at once; give ours a moment
            state.record("active", ctx.is_active())
    yield b"done"


# How a request stream that the client cancelled, or whose deadline passed,
# may end for the handler. grpcio's sync iterator mostly raises RpcError but
# ends cleanly when grpc-core reports the failed read before the cancel;
# grpc.aio's mostly ends cleanly and the task is cancelled at its next await,
# unless the cancel reaches the task while it waits for a message. Those
# are races inside grpcio itself, so all are "stopped"; what must hold is
# that the handler reads nothing more and sees its call is over.
_STOPPED = {"end": "stopped", "RpcError": "stopped", "CancelledError": "stopped"}


@each_flavour_and_uvloop
@each_kind
def test_client_cancel_mid_stream(flavour, kind):
    async def body(requests, ctx, state):
        async for item in _observe_end(requests, ctx, state, flavour):
            yield item

    def scenario(run):
        gate = run.state.event("client gate")
        try:
            started = streams.start(run.channel, kind, method("M"), streams.gated(streams.numbered(2), gate, [b"late"]))
            entered = run.state.event("entered").wait(WAIT)
            started.cancel()
            seen = run.state.wait_for("ended"), run.state.wait_for("active")
            return entered, streams.finish(started, kind), seen
        finally:
            gate.set()

    ref = flavour.same(streams.serving(flavour, kind, {"M": body}), scenario)
    assert ref[0] is True
    assert ref[1][0] == SC.CANCELLED
    assert ref[2] == (("stopped", 2), False)


@each_flavour
@each_kind
def test_deadline_while_handler_sleeps(flavour, kind):
    async def body(requests, ctx, state):
        got = [r async for r in requests]
        try:
            await sleep(0.6)
            state.record("slept", ("woke", ctx.is_active() if not flavour.aio else None))
        except BaseException as exc:  # noqa: BLE001
            state.record("slept", (streams.describe(exc), None))
            raise
        yield b"late:" + b"|".join(got)

    def scenario(run):
        out = streams.call(run.channel, kind, method("M"), streams.numbered(2), timeout=0.25)
        return out, run.state.wait_for("slept")

    ref = flavour.same(streams.serving(flavour, kind, {"M": body}), scenario)
    assert ref[0].brief() == (SC.DEADLINE_EXCEEDED, "Deadline Exceeded")
    assert ref[1] == flavour.pick(sync=("woke", False), aio=("CancelledError", None))


@each_flavour
@each_kind
def test_deadline_while_client_sends(flavour, kind):
    async def body(requests, ctx, state):
        async for item in _observe_end(requests, ctx, state, flavour):
            yield item

    def scenario(run):
        out = streams.call(run.channel, kind, method("M"), streams.endless(0.02, limit=3), timeout=0.3)
        # How many requests the handler read before the deadline varies with timing; the end doesn't.
        ended = run.state.wait_for("ended")[0]
        return out, ended, run.state.wait_for("active")

    ref = flavour.same(streams.serving(flavour, kind, {"M": body}), scenario)
    assert ref[0].brief() == (SC.DEADLINE_EXCEEDED, "Deadline Exceeded")
    assert ref[1:] == ("stopped", False)


# -- bidi ping-pong ------------------------------------------------------------------------


@each_flavour_and_uvloop
def test_bidi_ping_pong(flavour):
    """Each request is sent only once the answer to the previous one arrived:
    the handler must answer each message before the next comes in."""

    async def pong(requests, ctx, state):
        async for r in requests:
            state.append("log", b"recv " + r)
            yield b"pong " + r
            state.append("log", b"sent " + r)

    def scenario(run):
        return *streams.ping_pong(run.channel, method("M"), 5), run.state.records.get("log")

    ref = flavour.same(streams.serving(flavour, "stream_stream", {"M": pong}), scenario)
    assert ref[0] == [b"pong %d" % i for i in range(5)] and ref[1:3] == ([], SC.OK)
    # The answer to i went out before request i + 1 was read.
    assert ref[3] == [entry for i in range(5) for entry in (b"recv %d" % i, b"sent %d" % i)]


# -- message size limits -------------------------------------------------------------------


@each_flavour
@each_kind
def test_request_over_max_receive_message_length_in_stream(flavour, kind):
    """A 1025-byte message in a stream on a server limited to 1024 ends the
    call with RESOURCE_EXHAUSTED. The details are compared only on grpcio's
    side: ours are grpc-go's (README "Known differences")."""

    async def body(requests, ctx, state):
        try:
            async for r in requests:
                state.append("read", len(r))
        finally:
            state.event("done").set()
        yield b"read"

    def scenario(run):
        fits = streams.call(run.channel, kind, method("M"), [b"a" * 10, b"y" * 1024, b"b"])
        over = streams.call(run.channel, kind, method("M"), [b"a" * 10, b"x" * 1025, b"b"])
        return fits.code, over.code, over.details

    ref, ours = flavour.both(streams.serving(flavour, kind, {"M": body}), scenario, options=[("grpc.max_receive_message_length", 1024)])
    assert ref[:2] == ours[:2] == (SC.OK, SC.RESOURCE_EXHAUSTED)
    assert "1025" in ref[2] or "larger than max" in ref[2], ref[2]


def _rounds_with_a_refused_message(flavour, body, rounds):
    """(grpcio's, ours): bidi calls to body, a handler served with a receive
    limit of 1000, each sending 10 and 1000 bytes, then 1001 (refused) and
    10; per call what the client received, its code and the sizes the
    handler read."""

    def scenario(run):
        out = []
        for _ in range(rounds):
            run.state.records.pop("read", None)
            call = streams.call(run.channel, "stream_stream", method("M"), [b"a" * 10, b"b" * 1000, b"c" * 1001, b"d" * 10])
            out.append((call.responses, call.code, run.state.records.get("read", [])))
        return out

    setup = streams.serving(flavour, "stream_stream", {"M": body})
    return flavour.both(setup, scenario, options=[("grpc.max_receive_message_length", 1000)])


@each_flavour
def test_messages_before_one_over_the_limit_reach_the_handler(flavour):
    """The messages a client sent before one over the receive limit reach a
    handler that reads them, as on grpcio (the call ends when the handler
    asks for the refused one). Ours ended the call at once: what Go had
    read ahead was lost, the handler read 0-2 messages by timing (on
    aio.server() until the front held refusals for it: the task was
    cancelled before it read). grpc-go's transport still does (README:
    known differences): there only the status is the same."""

    async def body(requests, ctx, state):
        await sleep(0.1)  # the client's messages all arrive first
        async for r in requests:
            state.append("read", len(r))
            yield b"echo%d" % len(r)

    ref, ours = _rounds_with_a_refused_message(flavour, body, 3)
    assert ref == [((b"echo10", b"echo1000"), SC.RESOURCE_EXHAUSTED, [10, 1000])] * 3
    if TRANSPORT == "h2":
        assert ours == ref
    else:
        assert [code for _, code, _ in ours] == [SC.RESOURCE_EXHAUSTED] * 3


@each_flavour
def test_a_handler_that_never_reads_the_refused_message_answers(flavour):
    """A handler that stops reading before a message over the receive limit
    answers as it likes, as on grpcio, whose server refuses a message only
    when its handler reads it. Ours ended such a call with
    RESOURCE_EXHAUSTED as soon as the message arrived (aio.server(), and
    server() when the handler had read everything Go read ahead)."""

    async def body(requests, ctx, state):
        await sleep(0.1)  # the client's messages all arrive first
        n = 0
        async for r in requests:
            state.append("read", len(r))
            yield b"echo%d" % len(r)
            n += 1
            if n == 2:
                break
        await sleep(0.1)
        yield b"done"

    ref, ours = _rounds_with_a_refused_message(flavour, body, 2)
    assert ref == [((b"echo10", b"echo1000", b"done"), SC.OK, [10, 1000])] * 2
    if TRANSPORT == "h2":
        assert ours == ref
    else:  # grpc-go's transport ends the call when it meets the message
        assert [code for _, code, _ in ours] == [SC.RESOURCE_EXHAUSTED] * 2


@each_flavour
@pytest.mark.parametrize("reads_on", [True, False], ids=["reads_on", "stops_reading"])
def test_a_refused_message_that_arrives_while_the_handler_is_busy(flavour, reads_on):
    """A message over the receive limit that arrives when the handler has
    read everything before it and is busy elsewhere (not waiting for the
    next message): grpcio's call goes on, the handler's answer reaches the
    client, and the call ends RESOURCE_EXHAUSTED only if the handler asks
    for that message. server() ended such a call at once (nothing was
    waiting in Go's read-ahead, so the refusal wasn't held for the
    handler): the client lost "late", and a handler that stopped reading
    got RESOURCE_EXHAUSTED instead of its own answer."""

    async def body(requests, ctx, state):
        async for r in requests:
            state.append("read", len(r))
            if len(r) == 10:
                state.event("first read").set()
                await sleep(0.3)  # the refused message arrives meanwhile
                yield b"late"
                if not reads_on:
                    break
        yield b"done"

    def scenario(run):
        gate = run.state.event("first read")
        call = streams.call(run.channel, "stream_stream", method("M"), streams.gated([b"a" * 10], gate, [b"c" * 1001, b"d" * 10]))
        return call.responses, call.code, run.state.records.get("read", [])

    setup = streams.serving(flavour, "stream_stream", {"M": body})
    ref, ours = flavour.both(setup, scenario, options=[("grpc.max_receive_message_length", 1000)])
    if reads_on:
        assert ref == ((b"late",), SC.RESOURCE_EXHAUSTED, [10])
    else:
        assert ref == ((b"late", b"done"), SC.OK, [10])
    if TRANSPORT == "h2":
        assert ours == ref
    else:  # grpc-go's transport ends the call when it meets the message
        assert ours[1] == SC.RESOURCE_EXHAUSTED


@each_flavour
def test_a_refused_message_to_a_call_whose_client_stopped_reading(flavour):
    """A client that stops reading a bidi call's answers (its window runs
    out while the handler writes) and then sends it a message over the
    receive limit: the connection's other calls are served, and the call
    ends RESOURCE_EXHAUSTED once the client reads again. On the default
    transport the front queued that end on the connection's reader and
    waited there for room in the call's buffer, which only a WINDOW_UPDATE
    read by that same reader could make: the connection hung."""

    async def writes(requests, ctx, state):
        async for r in requests:
            state.event("writing").set()
            for _ in range(8):
                yield b"x" * (80 << 10)

    async def echo(request, ctx):
        return request

    def setup(server, state):
        flavour.handlers({"M": streams.handler(flavour, "stream_stream", writes, state), "Echo": flavour.unary(echo)})(server, state)

    def scenario(run):
        with RawH2(run.port) as raw:
            raw.headers(1, request_headers(method("M")))
            raw.data(1, grpc_message(b"go"), end_stream=False)
            assert run.state.event("writing").wait(WAIT)
            time.sleep(0.3)  # the handler's writes fill the window and the call's buffer
            raw.data(1, grpc_message(b"r" * 1001), end_stream=False)
            raw.unary(3, method("Echo"), b"hello")
            served = raw.statuses([3], timeout=5)
            raw.send(WindowUpdateFrame(1, 1 << 24))  # the client reads again
            return served, raw.statuses([1])

    ref = flavour.same(setup, scenario, options=[("grpc.max_receive_message_length", 1000)])
    assert ref == ({3: "0"}, {1: "8"})


@each_flavour
def test_a_message_with_an_undefined_flag(flavour):
    """A message whose flag byte is 2 (only bit 0 is defined; no gRPC client
    sends one): grpcio reads it as an empty message and ends the request
    stream there, quietly; both our
    transports end the call INTERNAL as grpc-go does (README). The default
    transport read it as a plain message."""

    async def body(requests, ctx, state):
        async for r in requests:
            yield b"e:" + r

    def scenario(run):
        with RawH2(run.port) as raw:
            raw.headers(1, request_headers(method("M")))
            raw.data(1, grpc_message(b"p1") + b"\x02\x00\x00\x00\x02hi" + grpc_message(b"p3"))
            frames = raw.collect(lambda fs: bool(fs) and fs[-1].stream_id == 1 and (fs[-1].end_stream or fs[-1].kind == "rst"))
        end = frames[-1].headers
        answers = b"".join(f.data for f in frames if f.kind == "data")
        return answers, end.get("grpc-status"), end.get("grpc-message")

    ref, ours = flavour.both(streams.serving(flavour, "stream_stream", {"M": body}), scenario)
    # grpcio: p1, then an empty message, and no more
    assert ref[1] == "0" and ref[0] == grpc_message(b"e:p1") + grpc_message(b"e:")
    assert ours[1:] == ("13", "grpc: received unexpected payload format 2")
    assert ours[0] in (b"", grpc_message(b"e:p1"))  # the end may overtake the answer


# -- compression -----------------------------------------------------------------------------


def _on_wire(kind, requests, request_compression=None):
    """A scenario calling M of kind through a WireTap: (the outcome, the
    client's message flags, the server's message flags)."""

    def scenario(run):
        tap = WireTap(run.port)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{tap.port}", compression=request_compression) as channel:
                out = streams.call(channel, kind, method("M"), requests)
            return out, tap.flags(), tap.response_flags()
        finally:
            tap.close()

    return scenario


@each_flavour
@each_kind
@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.Deflate], ids=["gzip", "deflate"])
def test_compressed_request_stream(flavour, kind, compression):
    async def body(requests, ctx, state):
        async for r in requests:
            yield r

    ref = flavour.same(streams.serving(flavour, kind, {"M": body}), _on_wire(kind, [BODY, BODY, BODY], compression))
    assert ref[0].code == SC.OK and ref[0].responses == _joined(kind, [BODY] * 3)
    assert ref[1] == [[1, 1, 1]]
    assert ref[2] == ([[0]] if kind == "stream_unary" else [[0, 0, 0]])


@each_flavour
@each_kind
def test_handler_sets_compression(flavour, kind):
    async def body(requests, ctx, state):
        ctx.set_compression(grpc.Compression.Gzip)
        if flavour.aio and kind == "stream_unary":
            # grpc.aio compresses a unary answer only if the initial metadata
            # went on its own (test_diff_compression.py).
            await ctx.send_initial_metadata(())
        async for r in requests:
            yield r

    ref = flavour.same(streams.serving(flavour, kind, {"M": body}), _on_wire(kind, [BODY, BODY]))
    assert ref[0].code == SC.OK and ref[2] == ([[1]] if kind == "stream_unary" else [[1, 1]])


@each_flavour
@each_kind
def test_server_default_compression_on_request_streams(flavour, kind):
    async def body(requests, ctx, state):
        async for r in requests:
            yield r

    setup = streams.serving(flavour, kind, {"M": body})
    ref = flavour.same(setup, _on_wire(kind, [BODY, BODY], grpc.Compression.Deflate), compression=grpc.Compression.Gzip)
    assert ref[1] == [[1, 1]] and ref[2] == ([[1]] if kind == "stream_unary" else [[1, 1]])


# -- interceptors --------------------------------------------------------------------------


def _wrapping_interceptor(kind):
    async def wrap(continuation, details):
        handler = await continuation(details)
        if handler is None:
            return None
        inner = getattr(handler, kind)

        async def upper(requests):
            async for r in requests:
                yield r.upper()

        if kind == "stream_unary":

            async def wrapped(requests, ctx):
                ctx.set_trailing_metadata((("x-wrapped", details.method),))
                return await inner(upper(requests), ctx) + b"!"

        else:

            async def wrapped(requests, ctx):
                ctx.set_trailing_metadata((("x-wrapped", details.method),))
                async for item in inner(upper(requests), ctx):
                    yield item + b"+"
                yield b"extra"

        return handler._replace(**{kind: wrapped})

    return wrap


@each_flavour
@each_kind
def test_interceptor_wraps_request_stream_handler(flavour, kind):
    async def body(requests, ctx, state):
        async for r in requests:
            yield b"e:" + r

    setup = streams.serving(flavour, kind, {"M": body})
    interceptors = [flavour.interceptor(_wrapping_interceptor(kind))]
    ref = flavour.same(setup, lambda run: streams.call(run.channel, kind, method("M"), [b"a", b"b"]), interceptors=interceptors)
    assert ref.code == SC.OK and ref.trailing_metadata == (("x-wrapped", method("M")),)
    assert ref.responses == ((b"e:A,e:B!",) if kind == "stream_unary" else (b"e:A+", b"e:B+", b"extra"))


@each_flavour
@each_kind
def test_interceptor_answers_request_stream_itself(flavour, kind):
    """An interceptor that hands back its own handler: the registered one never runs."""
    ran = []

    async def body(requests, ctx, state):
        ran.append(True)
        async for r in requests:
            yield r

    async def own(requests, ctx):
        await ctx.send_initial_metadata((("x-intercepted", "yes"),))
        n = 0
        async for _ in requests:
            n += 1
        ctx.set_trailing_metadata((("x-n", str(n)),))
        await ctx.abort(SC.PERMISSION_DENIED, "intercepted after %d" % n)

    async def own_stream(requests, ctx):
        await own(requests, ctx)
        yield b"never"

    async def answer(continuation, details):
        if details.method == method("M"):
            if kind == "stream_unary":
                return grpc.stream_unary_rpc_method_handler(own)
            return grpc.stream_stream_rpc_method_handler(own_stream)
        return await continuation(details)

    def scenario(run):
        out = streams.call(run.channel, kind, method("M"), streams.numbered(3))
        result = out, bool(ran)
        ran.clear()
        return result

    setup = streams.serving(flavour, kind, {"M": body})
    ref = flavour.same(setup, scenario, interceptors=[flavour.interceptor(answer)])
    assert ref[0].brief() == (SC.PERMISSION_DENIED, "intercepted after 3") and ref[1] is False
    assert ref[0].initial_metadata == (("x-intercepted", "yes"),) and ref[0].trailing_metadata == (("x-n", "3"),)


# -- what the context tells a stream handler about its client ----------------------------------


async def _who(requests, ctx, state):
    async for _ in requests:
        pass
    md = {}
    for m in ctx.invocation_metadata():
        md.setdefault(m[0], []).append(m[1])
    state.record("peer", peer_shape(ctx.peer()))
    state.record("metadata", (md.get("user-agent"), md.get("x-client"), md.get("x-client-bin")))
    yield b"ok"


def _who_scenario(kind, key):
    def scenario(run):
        metadata = (("x-client", "a"), ("x-client", "b"), ("x-client-bin", b"\x00\x01"))
        out = streams.call(run.channel, kind, method("M"), [b"1"], metadata=metadata)
        return out.code, run.state.wait_for(key)

    return scenario


@each_flavour_and_uvloop
@each_kind
def test_peer_in_stream_handler(flavour, kind):
    """peer() is the client's address, as in unary handlers."""
    ref = flavour.same(streams.serving(flavour, kind, {"M": _who}), _who_scenario(kind, "peer"))
    assert ref == (SC.OK, "ipv4:127.0.0.1:<port>")


@each_flavour_and_uvloop
@each_kind
def test_user_agent_and_metadata_in_stream_handler(flavour, kind):
    """The user-agent a stream handler sees is the client's own (grpcio's),
    and the client's metadata arrives as sent."""
    ref = flavour.same(streams.serving(flavour, kind, {"M": _who}), _who_scenario(kind, "metadata"))
    code, (user_agent, client, client_bin) = ref
    assert code == SC.OK and client == ["a", "b"] and client_bin == [b"\x00\x01"]
    assert len(user_agent) == 1 and user_agent[0].startswith("grpc-python/"), user_agent


# -- more of the context, and of the call ---------------------------------------------------


@each_flavour
@each_kind
@pytest.mark.parametrize("timeout", [20, None], ids=["deadline", "no-deadline"])
def test_time_remaining_in_stream_handler(flavour, kind, timeout):
    # Without a deadline the sync context gives a huge number, grpc.aio's None.
    async def body(requests, ctx, state):
        async for _ in requests:
            pass
        left = ctx.time_remaining()
        huge = left is not None and left > 10 * 365 * 24 * 3600
        state.record("left", (type(left).__name__, "huge" if huge else (None if left is None else round(left))))
        yield b""

    def scenario(run):
        return streams.call(run.channel, kind, method("M"), [b"a"], timeout=timeout).code, run.state.wait_for("left")

    ref = flavour.same(streams.serving(flavour, kind, {"M": body}), scenario)
    assert ref == (SC.OK, ("float", 20) if timeout else flavour.pick(sync=("float", "huge"), aio=("NoneType", None)))


@each_flavour
def test_bidi_headers_and_first_answer_before_requests_end(flavour):
    """The initial metadata and the first answer reach the client while it
    is still sending (its generator waits until it has them)."""

    async def body(requests, ctx, state):
        await ctx.send_initial_metadata((("x-early", "1"),))
        async for r in requests:
            yield b"e:" + r

    def scenario(run):
        gate = run.state.event("client gate")
        try:
            timed_out = []
            requests = streams.gated([b"a"], gate, [b"b"], timed_out=timed_out)
            started = streams.start(run.channel, "stream_stream", method("M"), requests)
            first = next(started)
            headers = tuple(started.initial_metadata())
            gate.set()
            return first, headers, streams.finish(started, "stream_stream"), timed_out
        finally:
            gate.set()

    ref = flavour.same(streams.serving(flavour, "stream_stream", {"M": body}), scenario)
    assert ref == (b"e:a", (("x-early", "1"),), (SC.OK, "", (b"e:b",)), [False])


@each_flavour
@each_kind
def test_many_concurrent_request_streams_on_one_connection(flavour, kind):
    setup = streams.serving(flavour, kind, {"M": _echo})

    def one(run, i):
        requests = [b"%d-%d" % (i, j) for j in range(40)]
        out = streams.call(run.channel, kind, method("M"), requests, timeout=20)
        return out.code, out.responses == _joined(kind, [b"e:" + r for r in requests]), out.trailing_metadata

    def scenario(run):
        with futures.ThreadPoolExecutor(6) as pool:
            return list(pool.map(lambda i: one(run, i), range(12)))

    assert flavour.same(setup, scenario, workers=16) == [(SC.OK, True, (("x-count", "40"),))] * 12


@each_flavour
@each_kind
def test_request_deserializer_fails_mid_stream(flavour, kind):
    def deserialize(data):
        if data == b"bad":
            raise ValueError("cannot deserialize")
        return data

    async def body(requests, ctx, state):
        got = []
        try:
            async for r in requests:
                got.append(r)
        finally:
            state.record("got", got)
        yield b"|".join(got)

    def scenario(run):
        # grpc.server()'s client-streaming handler waits for the next
        # message until the deadline: keep it short.
        out = streams.call(run.channel, kind, method("M"), [b"a", b"bad", b"c"], timeout=1)
        return out.code, out.details, out.responses, run.state.wait_for("got")

    setup = streams.serving(flavour, kind, {"M": body}, request_deserializer=deserialize)
    ref = flavour.same(setup, scenario)
    assert ref[:3] == flavour.pick(
        sync=(SC.INTERNAL, "Exception deserializing request!", ()),
        aio=(SC.UNKNOWN, "Unexpected <class 'ValueError'>: cannot deserialize", ()),
    )
    assert ref[3] == [b"a"]


@each_flavour
@each_kind
@pytest.mark.parametrize("bad", [ValueError("cannot deserialize"), None], ids=["raises", "gives-None"])
def test_request_deserializer_fails_in_a_plain_function(flavour, kind, bad):
    # As above, with the handler a plain function: grpc.aio runs it in its
    # migration thread pool, where a deserializer's exception reaches the
    # handler and its None is a message; grpc.server() ends the call.
    def deserialize(data):
        if data != b"bad":
            return data
        if bad is None:
            return None
        raise bad

    def read(requests):
        return b"|".join(b"None" if r is None else r for r in requests)

    def unary_body(requests, ctx):
        return read(requests)

    def stream_body(requests, ctx):
        yield read(requests)

    make = grpc.stream_unary_rpc_method_handler if kind == "stream_unary" else grpc.stream_stream_rpc_method_handler
    body = unary_body if kind == "stream_unary" else stream_body
    setup = flavour.handlers({"M": make(body, request_deserializer=deserialize)})

    def scenario(run):
        out = streams.call(run.channel, kind, method("M"), [b"a", b"bad", b"c"], timeout=1)
        return out.code, out.details, out.responses

    expected = flavour.pick(
        sync=(SC.INTERNAL, "Exception deserializing request!", ()),
        aio=(SC.OK, "", (b"a|None|c",)) if bad is None else (SC.UNKNOWN, "Unexpected <class 'ValueError'>: cannot deserialize", ()),
    )
    assert flavour.same(setup, scenario) == expected


def _plain(flavour, kind, read):
    """A setup serving method M of kind with a plain function (grpc.aio
    runs it in its migration thread pool) whose answer is read(requests,
    state)."""

    def setup(server, state):
        def answer(requests, ctx):
            return read(requests, state)

        def stream_body(requests, ctx):
            yield answer(requests, ctx)

        if kind == "stream_unary":
            handler = grpc.stream_unary_rpc_method_handler(answer)
        else:
            handler = grpc.stream_stream_rpc_method_handler(stream_body)
        flavour.handlers({"M": handler})(server, state)

    return setup


@each_loop
@each_kind
@pytest.mark.parametrize("end", ["cancel", "deadline"])
def test_plain_function_reads_on_after_the_call_is_gone(flavour, kind, end):
    # grpc.aio's request iterator, in its thread pool, just ends once the
    # client has cancelled or the deadline passed (ours raised RpcError, as
    # grpc.server()'s does, or ends, by timing: test_client_cancel_mid_stream).
    def read(requests, state):
        next(requests)
        state.event("entered").set()
        try:
            rest = list(requests)
            state.record("after", ("ended", len(rest)))
        except grpc.RpcError:
            state.record("after", "RpcError")
        return b"x"

    def scenario(run):
        gate = run.state.event("client gate")
        try:
            started = streams.start(run.channel, kind, method("M"), streams.gated([b"a"], gate, [b"late"]), timeout=0.5 if end == "deadline" else 10)
            run.state.event("entered").wait(WAIT)
            if end == "cancel":
                started.cancel()
            return run.state.wait_for("after")
        finally:
            gate.set()

    assert flavour.same(_plain(flavour, kind, read), scenario) == ("ended", 0)


@each_flavour
@each_kind
def test_a_thread_reading_requests_when_the_handler_answers(flavour, kind):
    # A handler hands its request iterator to a thread and answers while
    # that thread waits for the next message: on grpc.server() the thread's
    # loop just ends; on grpc.aio (a plain function, in its thread pool)
    # it raises UsageError. Ours raised RpcError on both.
    def read(requests, state):
        next(requests)

        def reader():
            try:
                rest = list(requests)
                state.record("reader", ("ended", len(rest)))
            except Exception as exc:  # noqa: BLE001
                state.record("reader", streams.describe(exc))

        threading.Thread(target=reader, daemon=True).start()
        time.sleep(0.1)  # the reader waits for a message the client holds back
        return b"answered"

    def scenario(run):
        gate = run.state.event("client gate")
        try:
            started = streams.start(run.channel, kind, method("M"), streams.gated([b"a"], gate, [b"late"]))
            code = streams.finish(started, kind)[0]
            return code, run.state.wait_for("reader")
        finally:
            gate.set()

    assert flavour.same(_plain(flavour, kind, read), scenario) == (
        SC.OK,
        flavour.pick(sync=("ended", 0), aio="UsageError"),
    )


@each_flavour
@each_kind
def test_response_over_max_send_message_length_in_stream(flavour, kind):
    async def body(requests, ctx, state):
        async for r in requests:
            yield b"r" * int(r)

    def scenario(run):
        fits = streams.call(run.channel, kind, method("M"), [b"10", b"20"])
        over = streams.call(run.channel, kind, method("M"), [b"10", b"2000"])
        return fits.code, over.code

    ref = flavour.same(streams.serving(flavour, kind, {"M": body}), scenario, options=[("grpc.max_send_message_length", 1024)])
    assert ref == (SC.OK, SC.RESOURCE_EXHAUSTED)
