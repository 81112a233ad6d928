"""Differential tests: message sizes, metadata sizes and server options on
grpc.server() and pygrpc_native.server(), and xds=True, which only
pygrpc_native refuses. The limits both kinds of server share (sizes against
the configured maximums, ignored options, maximum_concurrent_rpcs) are in
test_diff_limits.py."""

import decimal
import fractions
import threading
import time
from concurrent import futures

import grpc
import pytest

import pygrpc_native
from diff import TRANSPORT
from h2_raw import RawH2, grpc_message, request_headers
from diff.harness import WAIT, both, call_stream, call_unary, method, same, setup_handlers, stream, unary, wait_until

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode
MiB = 1024 * 1024


def _sized(req, ctx):
    """Answers with as many bytes as the request says (b"123" -> 123 bytes)."""
    return b"r" * int(req)


def _echo_setup(server, state):
    setup_handlers(
        {
            "Echo": unary(lambda req, ctx: req),
            "Sized": unary(_sized),
            "SizedStream": stream(lambda req, ctx: iter([b"a", b"s" * int(req), b"z"])),
        }
    )(server, state)


# -- large messages ---------------------------------------------------------------


def test_large_streamed_response():
    def scenario(run):
        out = call_stream(run.channel, method("SizedStream"), b"%d" % int(3.9 * MiB), timeout=20)
        return out.code, [len(r) for r in out.responses]

    ref = same(_echo_setup, scenario)
    assert ref == (SC.OK, [1, int(3.9 * MiB), 1])


def test_request_over_default_limit_code():
    # Compared on the code: the details are a known difference
    # (test_known_difference_oversized_request_details).
    def scenario(run):
        return call_unary(run.channel, method("Echo"), b"x" * (4 * MiB + 1), timeout=20).code

    assert same(_echo_setup, scenario) == SC.RESOURCE_EXHAUSTED


def test_oversized_request_details():
    """grpcio's words for an oversized request, "SERVER: Received message
    larger than max (N vs. M)" (h2 used grpc-go's until then). Known
    difference on grpc-go's transport, which answers with its own words
    before the front sees the message (README)."""
    scenario = lambda run: call_unary(run.channel, method("Echo"), b"x" * 2000).brief()  # noqa: E731
    ref, ours = both(_echo_setup, scenario, options=[("grpc.max_receive_message_length", 1024)])
    assert ref == (SC.RESOURCE_EXHAUSTED, "SERVER: Received message larger than max (2000 vs. 1024)")
    if TRANSPORT == "grpcgo":
        assert ours == (SC.RESOURCE_EXHAUSTED, "grpc: received message larger than max (2000 vs. 1024)")
    else:
        assert ours == ref


def test_known_difference_compressed_request_over_the_limit_once_decompressed():
    """README: decompression stops at the limit, so the details can't name
    the size grpcio names (it decompresses the message whole)."""

    def scenario(run):
        echo = run.channel.unary_unary(method("Echo"))
        try:
            echo(b"\0" * 2000, timeout=WAIT, compression=grpc.Compression.Gzip)
        except grpc.RpcError as err:
            return err.code(), err.details()

    ref, ours = both(_echo_setup, scenario, options=[("grpc.max_receive_message_length", 1024)])
    assert ref == (SC.RESOURCE_EXHAUSTED, "SERVER: Received message larger than max (2000 vs. 1024)")
    assert ours == (SC.RESOURCE_EXHAUSTED, "grpc: received message after decompression larger than max 1024")


def test_streamed_response_over_max_send_message_length():
    ref = same(
        _echo_setup,
        lambda run: call_stream(run.channel, method("SizedStream"), b"2000"),
        options=[("grpc.max_send_message_length", 1024)],
    )
    assert ref.code == SC.RESOURCE_EXHAUSTED and ref.responses == (b"a",)


def test_response_over_client_receive_limit():
    # The client's own limit: the server sends, the client refuses.
    ref = same(_echo_setup, lambda run: call_unary(run.channel, method("Sized"), b"%d" % (5 * MiB), timeout=20))
    assert ref.code == SC.RESOURCE_EXHAUSTED


# -- options ----------------------------------------------------------------------


class _IntLike:
    """A value that isn't an int but has __int__ (as numpy's integers,
    Decimal and Fraction): grpcio takes it as a pointer, which no server
    option reads (ours raised TypeError)."""

    def __int__(self) -> int:
        return 1024


@pytest.mark.parametrize(
    "value",
    [
        "1024",
        b"1024",
        1024.0,
        _IntLike(),
        decimal.Decimal(1024),
        pytest.param(
            fractions.Fraction(1024),
            # Without __int__ (before Python 3.11) grpcio refuses it at creation,
            # as ours does (test_option_value_of_unsupported_type_raises_at_creation).
            marks=pytest.mark.skipif(not hasattr(fractions.Fraction, "__int__"), reason="Fraction has __int__ from 3.11"),
        ),
    ],
    ids=["str", "bytes", "float", "__int__", "Decimal", "Fraction"],
)
def test_non_integer_option_value_is_ignored(value):
    # grpcio ignores a limit that isn't an integer: the 4 MiB default holds.
    def scenario(run):
        return call_unary(run.channel, method("Echo"), b"x" * 2000).code

    assert same(_echo_setup, scenario, options=[("grpc.max_receive_message_length", value)]) == SC.OK


@pytest.mark.parametrize(
    "value",
    [None, object(), 2**31, -(2**31) - 1, 2**63, 2**31 - 1, -(2**31), True],
    ids=["None", "object", "int-above-c-int", "int-below-c-int", "int-above-c-long", "c-int-max", "c-int-min", "bool"],
)
def test_option_value_of_unsupported_type_raises_at_creation(value):
    # Ints are read as a C int (4 GiB message limits included): beyond it,
    # OverflowError in grpcio's words for each step.
    def create(factory):
        pool = futures.ThreadPoolExecutor(1)
        try:
            server = factory(pool, options=[("grpc.max_receive_message_length", value)])
            server.stop(None)
            return "created"
        except Exception as exc:  # noqa: BLE001
            return type(exc).__name__, str(exc)
        finally:
            pool.shutdown(wait=False)

    ref, ours = create(grpc.server), create(pygrpc_native.server)
    assert ours == ref
    if isinstance(value, int) and -(2**31) <= value < 2**31:
        assert ref == "created"
    else:
        assert ref[0] == ("OverflowError" if isinstance(value, int) else "TypeError")


@pytest.mark.parametrize(
    "value,request_size",
    [(-1, 5 * MiB), (True, 2), (0, 1)],
    ids=["minus-one-is-unlimited", "True-is-1", "zero"],
)
def test_integer_edge_values_of_max_receive_message_length(value, request_size):
    def scenario(run):
        return call_unary(run.channel, method("Echo"), b"x" * request_size, timeout=20).code

    same(_echo_setup, scenario, options=[("grpc.max_receive_message_length", value)])


def test_max_concurrent_streams_serialises_a_connection():
    # With one stream per connection, calls on one channel run one at a time.
    def setup(server, state):
        lock = threading.Lock()
        counts = {"now": 0, "max": 0}

        def handler(req, ctx):
            with lock:
                counts["now"] += 1
                counts["max"] = max(counts["max"], counts["now"])
            time.sleep(0.1)
            with lock:
                counts["now"] -= 1
            return b"ok"

        state.record("counts", counts)
        setup_handlers({"M": unary(handler)})(server, state)

    def scenario(run):
        calls = [run.channel.unary_unary(method("M")).future(b"", timeout=10) for _ in range(3)]
        results = [c.result() for c in calls]
        return results, run.state.wait_for("counts")["max"]

    ref = same(setup, scenario, options=[("grpc.max_concurrent_streams", 1)])
    assert ref == ([b"ok"] * 3, 1)


def test_known_difference_a_cancelled_call_leaves_the_stream_limit_at_once():
    """README: a stream the client reset (a cancelled call) no longer counts
    toward grpc.max_concurrent_streams, even while its handler runs (RFC
    9113 5.1.2), so the call the client makes right after the cancel is
    taken. grpcio counts it until its handler lets go, so some of those
    calls get REFUSED_STREAM (UNAVAILABLE); how many is a race (20 of 60
    here on 2026-12-05), so only the kinds of its outcomes are checked."""
    rounds = 30

    def setup(server, state):
        def hold(req, ctx):
            state.event("entered").set()
            end = time.monotonic() + WAIT
            while ctx.is_active() and time.monotonic() < end:
                time.sleep(0.002)
            return b"late"

        setup_handlers({"Hold": unary(hold), "Echo": unary(lambda req, ctx: req)})(server, state)

    def scenario(run):
        outcomes = []
        entered = run.state.event("entered")
        for _ in range(rounds):
            entered.clear()
            held = run.channel.unary_unary(method("Hold")).future(b"", timeout=10)
            # grpcio may refuse this call too (the last round's streams
            # still count there): then there is nothing to cancel.
            if not wait_until(lambda: entered.is_set() or held.done()):
                return "the held call neither reached its handler nor ended"
            held.cancel()
            try:
                run.channel.unary_unary(method("Echo"))(b"x", timeout=WAIT)
                outcomes.append(SC.OK)
            except grpc.RpcError as err:
                outcomes.append(err.code())
        return outcomes

    ref, ours = both(setup, scenario, options=[("grpc.max_concurrent_streams", 1)])
    assert set(ref) <= {SC.OK, SC.UNAVAILABLE}
    assert ours == [SC.OK] * rounds


def test_request_metadata_over_absolute_limit():
    """Same code and wording; the sizes in the details differ slightly
    (README, known differences): grpcio also counts pseudo-headers that
    grpc-go doesn't expose, and lists the fields in wire order."""
    md = (("x-big", "v" * 4000),)
    prefix = "received metadata size exceeds hard limit ("

    def scenario(run):
        code, details = call_unary(run.channel, method("Echo"), b"x", metadata=md).brief()
        return code, details.startswith(prefix), "x-big:4037B" in details

    ref = same(_echo_setup, scenario, options=[("grpc.absolute_max_metadata_size", 2048)])
    assert ref == (SC.RESOURCE_EXHAUSTED, True, True)


def test_request_metadata_over_the_limit_names_fields_up_to_the_crossing_one():
    """grpcio names the fields in the order they came, up to the one that
    crossed the limit; ours named every field, sorted by key, and with
    thousands of keys its details outgrew the client's limit ("Stream
    removed")."""
    big = (("zz", "a" * 6000), ("aa", "b" * 6000), ("mm", "c" * 6000), ("after", "d"))
    many = tuple((f"k{i}", "v") for i in range(2000))

    def scenario(run):
        named = call_unary(run.channel, method("Echo"), b"x", metadata=big).brief()
        crowd = call_unary(run.channel, method("Echo"), b"x", metadata=many).brief()
        return named[0], named[1].endswith(" zz:6034B aa:6034B mm:6034B"), crowd[0], len(crowd[1]) < 8192

    ref, ours = both(_echo_setup, scenario)
    assert ref == (SC.RESOURCE_EXHAUSTED, True, SC.RESOURCE_EXHAUSTED, True)
    # grpc-go's transport gives the front its metadata without its order.
    assert ours == (ref if TRANSPORT == "h2" else (SC.RESOURCE_EXHAUSTED, ours[1], SC.RESOURCE_EXHAUSTED, True))


def test_a_refused_request_the_client_still_sends_is_reset():
    """A request over grpc.max_receive_message_length from a client that
    hasn't half-closed: trailers RESOURCE_EXHAUSTED, then RST_STREAM
    NO_ERROR, as grpcio's server ends it. Ours sent no reset and gave no
    window back for the rest of the request: a client that sends its whole
    request before reading (curl, grpclib) waited for window forever."""

    def scenario(run):
        with RawH2(run.port) as conn:
            conn.headers(1, request_headers(method("Echo")))
            conn.data(1, grpc_message(b"x" * 2000), end_stream=False)
            frames = conn.collect(lambda fs: any(f.kind == "rst" and f.stream_id == 1 for f in fs), timeout=10)
        return [
            (f.kind, f.end_stream, f.headers.get("grpc-status"), f.error_code)
            for f in frames
            if f.stream_id == 1 and f.kind in ("headers", "rst")
        ]

    ref = same(_echo_setup, scenario, options=[("grpc.max_receive_message_length", 1024)])
    assert ref == [("headers", True, "8", 0), ("rst", False, None, 0)]


@pytest.mark.parametrize(
    "options,advertised",
    [([], 16384), ([("grpc.absolute_max_metadata_size", 2048)], 2048), ([("grpc.max_metadata_size", 20000)], 25000)],
    ids=["default", "absolute", "soft"],
)
def test_metadata_limit_advertised_in_settings(options, advertised):
    """The request metadata limit goes to clients as HTTP/2's
    SETTINGS_MAX_HEADER_LIST_SIZE, as grpcio's server sends it, so that a
    client honouring it refuses such a call itself, as against grpcio (a
    grpc-go client with INTERNAL). Ours advertised 1 MiB whatever the
    options; grpc-go's transport advertises 16 MiB (README: known
    differences)."""

    def scenario(run):
        with RawH2(run.port) as conn:
            frames = conn.collect(lambda fs: any(f.kind == "settings" and f.settings for f in fs))
        return [f.settings.get(0x6) for f in frames if f.kind == "settings" and f.settings]

    ref, ours = both(_echo_setup, scenario, options=options)
    assert ref == [advertised]
    assert ours == (ref if TRANSPORT == "h2" else [16 << 20])


def test_request_metadata_over_default_limit():
    def scenario(run):
        big = call_unary(run.channel, method("Echo"), b"x", metadata=(("x-big", "v" * 20000),))
        # The channel still works for the next call.
        after = call_unary(run.channel, method("Echo"), b"after")
        return big.brief(), after.brief(), after.responses

    ref = same(_echo_setup, scenario)
    assert ref[0][0] == SC.RESOURCE_EXHAUSTED and ref[2] == (b"after",)


# -- what only pygrpc_native refuses (README "Server options") -------------------------


def test_ours_only_refused_xds():
    pool = futures.ThreadPoolExecutor(1)
    try:
        with pytest.raises(ValueError, match="xds"):
            pygrpc_native.server(pool, xds=True)
    finally:
        pool.shutdown(wait=False)


def test_option_given_twice_keeps_its_first_value():
    def scenario(run):
        return call_unary(run.channel, method("Echo"), b"x" * 50).code

    for values, code in (((10, 100), SC.RESOURCE_EXHAUSTED), ((100, 10), SC.OK)):
        options = [("grpc.max_receive_message_length", v) for v in values]
        assert same(_echo_setup, scenario, options=options) == code


@pytest.mark.parametrize("limit", [0, -1, -1.5])
def test_maximum_concurrent_rpcs_below_one_refuses_every_call(limit):
    # grpc.server() takes such a limit and refuses every call it serves
    # (grpc.aio refuses the limit: test_aio_diff_lifecycle.py); a path no
    # handler knows still gets UNIMPLEMENTED.
    setup = setup_handlers({"Echo": unary(lambda req, ctx: req), "S": stream(lambda req, ctx: iter((req,)))})

    def scenario(run):
        return (
            call_unary(run.channel, method("Echo"), b"x").brief(),
            call_stream(run.channel, method("S"), b"x").brief(),
            call_unary(run.channel, method("Nope"), b"x").brief(),
        )

    refused = (SC.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!")
    assert same(setup, scenario, maximum_concurrent_rpcs=limit) == (refused, refused, (SC.UNIMPLEMENTED, "Method not found!"))


@pytest.mark.parametrize("limit", [float("inf"), float("nan"), 10**30])
def test_maximum_concurrent_rpcs_no_count_reaches(limit):
    # grpcio refuses a call while its active ones are >= the limit: never.
    setup = setup_handlers({"Echo": unary(lambda req, ctx: req)})
    assert same(setup, lambda run: call_unary(run.channel, method("Echo"), b"x").brief(), maximum_concurrent_rpcs=limit) == (
        SC.OK,
        "",
    )


def test_known_difference_maximum_concurrent_rpcs_not_a_number():
    """README: grpc.server() takes a limit that isn't a number, and its
    serving thread dies at the first call (every call then waits for its
    deadline); ours refuses it when the server is made."""
    with pytest.raises(TypeError, match="maximum_concurrent_rpcs must be a number, got '3'"):
        pygrpc_native.server(futures.ThreadPoolExecutor(1), maximum_concurrent_rpcs="3")
