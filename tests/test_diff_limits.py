"""Differential tests: message sizes, server options and
maximum_concurrent_rpcs, each scenario run on both kinds of server
(tests/diff/flavours.py). More limits of the sync servers are in
test_server_diff_limits.py; the aio server's lifecycle and creation
arguments in test_aio_diff_lifecycle.py.
"""

import asyncio
import time
from concurrent import futures

import grpc
import pytest

from diff import aio_harness, harness
from diff.flavours import SYNC, each_flavour, each_flavour_and_uvloop, wait_event
from diff.harness import WAIT, call_stream, call_unary, future_outcome, method, wait_until

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode
MiB = 1024 * 1024


def _echo_setup(flavour):
    async def echo(req, ctx):
        return req

    async def sized(req, ctx):
        """Answers with as many bytes as the request says (b"123" -> 123 bytes)."""
        return b"r" * int(req)

    return flavour.handlers({"Echo": flavour.unary(echo), "Sized": flavour.unary(sized)})


# -- message sizes ------------------------------------------------------------------


@each_flavour
@pytest.mark.parametrize("size", [1 * MiB, int(3.9 * MiB)], ids=["1MiB", "3.9MiB"])
def test_large_request_and_response(flavour, size):
    payload = bytes(range(256)) * (size // 256)

    def scenario(run):
        out = call_unary(run.channel, method("Echo"), payload, timeout=20)
        return out.code, out.details, len(out.responses[0]) if out.responses else None, out.responses == (payload,)

    ref = flavour.same(_echo_setup(flavour), scenario)
    assert ref == (SC.OK, "", len(payload), True)


def _codes_at_1024_and_1025_bytes(run):
    """The codes of an echo of 1024 bytes, then of 1025: a 1 KiB receive limit shows."""
    return tuple(call_unary(run.channel, method("Echo"), b"x" * size).code for size in (1024, 1025))


@each_flavour
def test_request_over_max_receive_message_length_code(flavour):
    options = [("grpc.max_receive_message_length", 1024)]
    ref = flavour.same(_echo_setup(flavour), _codes_at_1024_and_1025_bytes, options=options)
    assert ref == (SC.OK, SC.RESOURCE_EXHAUSTED)


@each_flavour
def test_response_over_max_send_message_length(flavour):
    def scenario(run):
        fits = call_unary(run.channel, method("Sized"), b"1024")
        return (fits.code, [len(r) for r in fits.responses]), call_unary(run.channel, method("Sized"), b"2000")

    ref = flavour.same(_echo_setup(flavour), scenario, options=[("grpc.max_send_message_length", 1024)])
    assert ref[0] == (SC.OK, [1024]) and ref[1].code == SC.RESOURCE_EXHAUSTED


# -- options ----------------------------------------------------------------------


@each_flavour
def test_ignored_options(flavour):
    options = [
        ("grpc.some_option_nobody_knows", 1),
        ("grpc.primary_user_agent", "diff-suite"),
        ("grpc.http2.max_frame_size", 16384),
        ("grpc.enable_retries", 0),
        ("grpc.default_compression_algorithm", 0),
        ("grpc.optimization_target", "latency"),
        ("grpc.so_reuseport", 0),
        ("grpc.keepalive_time_ms", 60000),
        ("grpc.keepalive_timeout_ms", 20000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.max_receive_message_length", "1024"),  # not an integer: ignored
    ]

    def scenario(run):
        return call_unary(run.channel, method("Echo"), b"hello").responses, call_unary(run.channel, method("Echo"), b"x" * 2000).code

    assert flavour.same(_echo_setup(flavour), scenario, options=options) == ((b"hello",), SC.OK)


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "aio"])
def test_options_given_as_an_iterator(aio):
    """grpcio reads options once (tuple(options)), so an iterator or a
    generator works as a list does; pygrpc_native's checks used it up and
    its server ran without the options (a 2,000-byte request was served)."""
    def outcome(kind):
        options = iter([("grpc.max_receive_message_length", 1024)])
        handler = grpc.method_handlers_generic_handler(
            harness.SERVICE, {"Echo": grpc.unary_unary_rpc_method_handler(lambda req, ctx: req)}
        )

        def code(port):
            with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                return call_unary(ch, method("Echo"), b"x" * 2000).code

        if not aio:
            with futures.ThreadPoolExecutor(2) as pool:
                server = harness.factory(kind)(pool, handlers=(handler,), options=options)
                port = server.add_insecure_port("127.0.0.1:0")
                server.start()
                try:
                    return code(port)
                finally:
                    server.stop(None)

        async def run():
            server = aio_harness.factory(kind)(handlers=(handler,), options=options)
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            try:
                return await asyncio.get_running_loop().run_in_executor(None, code, port)
            finally:
                await server.stop(None)

        return asyncio.run(run())

    assert harness.for_both(outcome) == SC.RESOURCE_EXHAUSTED


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "aio"])
def test_compression_values_int_cannot_read(aio):
    """grpcio int()s the compression argument, so what int() can't read
    fails the server's creation with int()'s own error; ours raised
    TypeError for every value that wasn't an int (True, 2.0 and "2" serve:
    test_diff_compression.py)."""
    def error(kind, value):
        try:
            if aio:
                async def make():
                    await aio_harness.factory(kind)(compression=value).stop(None)

                asyncio.run(make())
            else:
                with futures.ThreadPoolExecutor(1) as pool:
                    harness.factory(kind)(pool, compression=value).stop(None)
        except Exception as e:  # noqa: BLE001 - the error is what's compared
            return type(e)
        return None

    for value, expected in (("gzip", ValueError), ([2], TypeError), ("", None), (0.0, None)):
        assert harness.for_both(lambda kind: error(kind, value)) == expected, value


@each_flavour
def test_option_names_given_as_bytes(flavour):
    # grpcio takes bytes option names as it takes str ones: known ones apply,
    # unknown ones are ignored.
    options = [(b"grpc.some_option_nobody_knows", 1), (b"grpc.max_receive_message_length", 1024)]
    ref = flavour.same(_echo_setup(flavour), _codes_at_1024_and_1025_bytes, options=options)
    assert ref == (SC.OK, SC.RESOURCE_EXHAUSTED)


@each_flavour
def test_server_compression_none_serves(flavour):
    def scenario(run):
        return call_unary(run.channel, method("Echo"), b"abc").responses

    assert flavour.same(_echo_setup(flavour), scenario, compression=grpc.Compression.NoCompression) == (b"abc",)


# -- maximum_concurrent_rpcs --------------------------------------------------------


def _blocking_setup(flavour):
    """Block and S wait for the test's "release" (S after its first message);
    both set "entered" first."""

    async def block(req, ctx, state):
        state.event("entered").set()
        await wait_event(state.event("release"))
        return b"released"

    async def block_stream(req, ctx, state):
        yield b"first"
        state.event("entered").set()
        await wait_event(state.event("release"))
        yield b"second"

    def setup(server, state):
        _echo_setup(flavour)(server, state)
        flavour.recording("Block", block)(server, state)
        flavour.recording("S", block_stream, streaming=True)(server, state)

    return setup


@each_flavour_and_uvloop
def test_maximum_concurrent_rpcs(flavour):
    def scenario(run):
        first = run.channel.unary_unary(method("Block")).future(b"", timeout=10)
        assert run.state.event("entered").wait(WAIT)
        refused = call_unary(run.channel, method("Echo"), b"x")
        run.state.event("release").set()
        first_result = first.result(timeout=WAIT)
        time.sleep(0.2)  # grpcio counts the call done a moment after it ends
        after = call_unary(run.channel, method("Echo"), b"y")
        return first_result, refused, after

    ref = flavour.same(_blocking_setup(flavour), scenario, maximum_concurrent_rpcs=1)
    assert ref[0] == b"released"
    assert ref[1].brief() == (SC.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!")
    assert ref[2].responses == (b"y",)


@each_flavour
def test_maximum_concurrent_rpcs_after_the_method_lookup(flavour):
    # At the limit, a path no handler knows is still UNIMPLEMENTED.
    def scenario(run):
        first = run.channel.unary_unary(method("Block")).future(b"", timeout=10)
        assert run.state.event("entered").wait(WAIT)
        unknown = call_unary(run.channel, method("Nope"), b"x").brief()
        known = call_unary(run.channel, method("Echo"), b"x").brief()
        run.state.event("release").set()
        return first.result(timeout=WAIT), unknown, known

    ref = flavour.same(_blocking_setup(flavour), scenario, maximum_concurrent_rpcs=1)
    assert ref[1:] == ((SC.UNIMPLEMENTED, "Method not found!"), (SC.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!"))


@each_flavour
def test_maximum_concurrent_rpcs_refuses_before_the_request(flavour):
    """At the limit a unary call is refused at once, as grpcio refuses it
    before reading its request: one that sends none gets RESOURCE_EXHAUSTED
    (not "requires exactly one request message"), one whose request is
    still coming doesn't wait for it (ours did, on h2)."""

    def late():
        time.sleep(2)
        yield b"late"

    def scenario(run):
        first = run.channel.unary_unary(method("Block")).future(b"", timeout=10)
        assert run.state.event("entered").wait(WAIT)
        as_stream = run.channel.stream_unary(method("Echo"))
        outcomes = []
        for requests in (iter([]), late()):
            started = time.monotonic()
            try:
                as_stream(requests, timeout=WAIT)
                outcomes.append("served")
            except grpc.RpcError as err:
                outcomes.append((err.code(), err.details(), time.monotonic() - started < 1))
        run.state.event("release").set()
        return first.result(timeout=WAIT), outcomes

    ref = flavour.same(_blocking_setup(flavour), scenario, maximum_concurrent_rpcs=1)
    assert ref[1] == [(SC.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!", True)] * 2


@each_flavour
def test_maximum_concurrent_rpcs_counts_streams(flavour):
    def scenario(run):
        call = run.channel.unary_stream(method("S"))(b"", timeout=10)
        first = next(call)
        assert run.state.event("entered").wait(WAIT)
        refused = call_stream(run.channel, method("S"), b"")
        run.state.event("release").set()
        rest = list(call)
        return first, rest, refused

    ref = flavour.same(_blocking_setup(flavour), scenario, maximum_concurrent_rpcs=1)
    assert ref[2].brief() == (SC.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!")


@each_flavour
@pytest.mark.parametrize("limit", [1.5, True])
def test_maximum_concurrent_rpcs_not_an_int(flavour, limit):
    """grpc.server() refuses a call while its active ones are >= the limit,
    so 1.5 lets two run; grpc.aio truncates it to an int (1); True is 1 on
    both. Ours refused any limit but an int (ValueError)."""

    def scenario(run):
        entered = run.state.event("entered")
        first = run.channel.unary_unary(method("Block")).future(b"", timeout=10)
        assert entered.wait(WAIT)
        entered.clear()
        second = run.channel.unary_unary(method("Block")).future(b"", timeout=10)
        assert wait_until(lambda: entered.is_set() or second.done())
        third = call_unary(run.channel, method("Echo"), b"x").brief()
        run.state.event("release").set()
        return future_outcome(first), future_outcome(second), third

    ref = flavour.same(_blocking_setup(flavour), scenario, maximum_concurrent_rpcs=limit)
    refused = (SC.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!")
    two_run = flavour is SYNC and limit == 1.5
    assert ref == ("ok", "ok" if two_run else SC.RESOURCE_EXHAUSTED, refused)


@each_flavour
def test_maximum_concurrent_rpcs_not_reached(flavour):
    def scenario(run):
        calls = [run.channel.unary_unary(method("Echo")).future(b"%d" % i, timeout=10) for i in range(4)]
        return [c.result() for c in calls]

    assert flavour.same(_blocking_setup(flavour), scenario, maximum_concurrent_rpcs=4) == [b"0", b"1", b"2", b"3"]
