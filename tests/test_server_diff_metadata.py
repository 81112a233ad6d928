"""Differential tests: metadata as only the sync servers show it (the order
of response metadata across keys as the comparison allows it, bytes keys in
trailing metadata, a plain generator aborting), grpc.server() against
pygrpc_native.server(). The scenarios both kinds of server share are in
test_diff_metadata.py."""

import grpc
import pytest

from diff import TRANSPORT
from diff.flavours import SYNC
from diff.harness import SERVICE, both, call_unary, method, same, setup_handlers, unary
from h2_raw import RawH2, grpc_message, request_headers

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


def test_send_initial_metadata_then_abort_in_stream_before_messages():
    def handler(req, ctx):
        ctx.send_initial_metadata((("x-init", "s"),))
        ctx.abort(SC.INTERNAL, "before any message")
        yield b"never"  # noqa: unreachable - a generator

    ref = SYNC.stream_case(handler)
    assert ref.initial_metadata == (("x-init", "s"),)


def test_initial_metadata_order_preserved():
    """grpcio keeps the order the handler gave; ours keeps it within each
    key only (README, known differences), which the comparison allows."""
    md = tuple((f"x-{name}", str(i)) for i, name in enumerate(["zeta", "alpha", "mid", "beta", "omega", "delta"]))

    def handler(req, ctx):
        ctx.send_initial_metadata(md)
        return b""

    ref = SYNC.unary_case(handler)
    assert ref.initial_metadata == md


def test_known_difference_response_metadata_order_across_keys():
    """README, known differences: response metadata reaches the client
    grouped by key in an order grpc-go picks; the values of one key keep
    their order."""
    md = (("x-b", "1"), ("x-a", "2"), ("x-b", "3"), ("x-c", "4"), ("x-a", "5"))

    def setup(server, state):
        def handler(req, ctx):
            ctx.send_initial_metadata(md)
            ctx.set_trailing_metadata(md)
            return b""

        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"M": unary(handler)}),))

    def scenario(run):
        return call_unary(run.channel, method("M"), b"")

    ref, ours = both(setup, scenario)
    assert ref.initial_metadata == md and ref.trailing_metadata == md
    if TRANSPORT == "h2":  # the front's own transport keeps the order
        assert (ours.initial_metadata, ours.trailing_metadata) == (md, md)
    for got in (ours.initial_metadata, ours.trailing_metadata):
        assert sorted(got) == sorted(md)
        for key in ("x-a", "x-b"):
            assert [v for k, v in got if k == key] == [v for k, v in md if k == key]


@pytest.mark.parametrize("bad", [("Abc", "v"), ("a b", "v"), ("x-u", "caf\u00e9")])
def test_initial_metadata_gRPC_cannot_carry_returns(bad):
    """send_initial_metadata() with a key that isn't a header name or a
    value that isn't printable ASCII returns, and the handler runs on; the
    call ends INTERNAL "Invalid metadata" (ours raised ValueError into the
    handler)."""

    def setup(server, state):
        def handler(req, ctx):
            state.record("returned", ctx.send_initial_metadata((bad,)))
            return b"resp"

        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"M": unary(handler)}),))

    def scenario(run):
        return call_unary(run.channel, method("M"), b"").brief(), run.state.wait_for("returned")

    assert same(setup, scenario) == ((SC.INTERNAL, "Invalid metadata"), None)


@pytest.mark.parametrize(
    "bad", [{"a": "1"}, (("a", "1", "2"),), (5,), (("a",),)], ids=["dict", "triple", "int", "single"]
)
def test_malformed_initial_metadata_raises_as_grpcio(bad):
    """An item that isn't a pair raises what unpacking it into two raises:
    ValueError for a sequence of another length (a dict's str keys
    included), TypeError for one that isn't a sequence (ours raised
    TypeError for all)."""

    def setup(server, state):
        def handler(req, ctx):
            try:
                ctx.send_initial_metadata(bad)
            except Exception as err:  # noqa: BLE001 - its type is the outcome
                state.record("raised", type(err).__name__)
            return b"resp"

        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"M": unary(handler)}),))

    def scenario(run):
        return call_unary(run.channel, method("M"), b"").brief(), run.state.wait_for("raised")

    assert same(setup, scenario)[1] == ("TypeError" if bad == (5,) else "ValueError")


def test_trailing_metadata_keys_given_as_bytes():
    # The sync server takes bytes keys (and values) in trailing metadata as
    # well as str ones; grpc.aio refuses them (test_aio_diff_metadata.py).
    def handler(req, ctx):
        ctx.set_trailing_metadata(((b"x-trail", b"t"), ("x-str", "s")))
        return b"resp"

    ref = SYNC.unary_case(handler)
    assert sorted(ref.trailing_metadata) == [("x-str", "s"), ("x-trail", "t")]


# -- requests no grpcio client sends (raw HTTP/2) ---------------------------------------


_echo_setup = setup_handlers({"Echo": unary(lambda req, ctx: req)})


def _answer(port, headers, payload):
    """The frames of stream 1 the server sends for one unary call sent as
    raw HTTP/2 with these request headers, to its end (trailers or reset)."""
    with RawH2(port) as conn:
        conn.headers(1, headers)
        conn.data(1, grpc_message(payload))
        frames = conn.collect(lambda fs: bool(fs) and fs[-1].stream_id == 1 and (fs[-1].end_stream or fs[-1].kind == "rst"))
    return [f for f in frames if f.stream_id == 1]


def _raw_unary(port, headers, payload=b"x"):
    """A unary call sent as raw HTTP/2 with these request headers: the
    :status, grpc-status, grpc-message and message the server answers."""
    answer = _answer(port, headers, payload)
    status = next((f.headers.get(":status") for f in answer if f.kind == "headers" and ":status" in f.headers), None)
    end = answer[-1]
    data = b"".join(f.data[5:] for f in answer if f.kind == "data")
    return status, end.headers.get("grpc-status"), end.headers.get("grpc-message"), data


def _fields_on_the_wire(port, headers, payload):
    """The HEADERS frames the server sends for one unary call: each a list
    of (name, value), in order."""
    return [list(f.headers.items()) for f in _answer(port, headers, payload) if f.kind == "headers"]


@pytest.mark.parametrize(
    "case,server_kwargs",
    [
        ("ok", {}),
        ("error", {}),
        ("gzip", {"compression": grpc.Compression.Gzip}),
        ("gzip and identity only", {"options": [("grpc.compression_enabled_algorithms_bitset", 5)]}),
    ],
)
def test_the_fields_the_server_writes_itself(case, server_kwargs):
    """Response headers and trailers as grpcio writes them: the encodings
    it takes (grpc-accept-encoding, in its order, after grpc-encoding) in
    the headers, grpc-message in the trailers even when empty, a
    trailers-only answer without grpc-accept-encoding. Ours sent neither
    (grpc-go's transport sends the empty grpc-message only)."""

    def handler(req, ctx):
        if req == b"error":
            ctx.abort(grpc.StatusCode.NOT_FOUND, "")
        ctx.send_initial_metadata((("x-i", "1"),))
        return req

    extra = [("grpc-accept-encoding", "gzip")] if case == "gzip" else []
    payload = b"error" if case == "error" else b"x"
    ref, ours = both(
        setup_handlers({"Echo": unary(handler)}),
        lambda run: _fields_on_the_wire(run.port, request_headers(method("Echo"), extra=extra), payload),
        **server_kwargs,
    )
    if TRANSPORT == "h2":
        assert ours == ref
    accepted = "identity, gzip" if case == "gzip and identity only" else "identity, deflate, gzip"
    if case == "error":
        assert ref == [[(":status", "200"), ("content-type", "application/grpc"), ("grpc-status", "5"), ("grpc-message", "")]]
    else:
        encoding = [("grpc-encoding", "gzip")] if case == "gzip" else []
        head = [(":status", "200"), ("content-type", "application/grpc"), *encoding, ("grpc-accept-encoding", accepted), ("x-i", "1")]
        assert ref == [head, [("grpc-status", "0"), ("grpc-message", "")]]


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/grpc-web", "text/plain", None], ids=["json", "grpc-web", "text", "none"]
)
def test_a_request_of_any_content_type_is_served(content_type):
    """grpcio's server serves a request whatever its content-type (a proxy
    forwarding grpc-web unchanged, a hand-made call); ours answered 415 and
    INVALID_ARGUMENT, as grpc-go does (its transport still does: README,
    known differences)."""
    headers = [h for h in request_headers(method("Echo")) if h[0] != "content-type"]
    if content_type is not None:
        headers.append(("content-type", content_type))
    ref, ours = both(_echo_setup, lambda run: _raw_unary(run.port, headers))
    assert ref[:2] == ("200", "0") and ref[3] == b"x"
    if TRANSPORT == "h2":
        assert ours[:2] == ref[:2] and ours[3] == ref[3]
    else:
        assert ours[:2] == ("415", "3")


_binary_value_setup = setup_handlers(
    {"Echo": unary(lambda req, ctx: repr(dict(ctx.invocation_metadata()).get("x-b-bin")).encode())}
)


@pytest.mark.parametrize(
    "value,seen",
    [("YWJj", b"abc"), ("YWI=", b"ab"), ("YWI", b"ab"), ("AA=", b"\x00"), ("AAAA====", b"\x00" * 3), ("=", b"")]
    + [("YWJ", None), ("YWJj,YWJj", None), ("YWJj, YWJj", None), ("A", None)],
)
def test_binary_values_as_grpc_core_decodes_them(value, seen):
    """grpc-core's base64: '=' at the end ignored however many, bits past
    the last byte zero, no lists; ours refused padding that wasn't right,
    took bits that weren't zero, and joined comma-separated values into
    one. (grpc-go's transport reads them its way: HTTP 400 for those it
    refuses, README.)"""
    headers = request_headers(method("Echo"), extra=[("x-b-bin", value)])
    ref, ours = both(_binary_value_setup, lambda run: _raw_unary(run.port, headers))
    if seen is None:
        assert ref[1:] == ("13", "Error parsing 'x-b-bin' metadata: illegal base64 encoding", b"")
    else:
        assert ref[1:] == ("0", "", repr(seen).encode())
    if TRANSPORT == "h2":
        assert ours == ref


@pytest.mark.parametrize(
    "timeout,served",
    [(" 5S", True), ("5 S", True), ("5S ", True), ("100000000S", True), ("99999999999S", True)]
    + [("+5S", False), ("\t5S", False), ("5S!", False)],
)
def test_grpc_timeout_as_grpc_core_reads_it(timeout, served):
    """grpc-core reads spaces around a grpc-timeout's number and unit, and
    more digits than the spec's 8; ours answered those INTERNAL (grpc-go's
    transport still does: it answers :status 400, as for any it can't
    read)."""
    headers = request_headers(method("Echo"), timeout=timeout)
    ref, ours = both(_echo_setup, lambda run: _raw_unary(run.port, headers))
    assert ref[1:] == (("0", "", b"x") if served else ("13", "Error parsing 'grpc-timeout' metadata", b""))
    if TRANSPORT == "h2":
        assert ours[1:] == ref[1:]
    elif not served:
        assert ours[1] == "13"  # in grpc-go's words


@pytest.mark.parametrize(
    "extra,details",
    [
        ([("grpc-timeout", "soon")], "Error parsing 'grpc-timeout' metadata"),
        ([("x-b-bin", "!!!notbase64")], "Error parsing 'x-b-bin' metadata: illegal base64 encoding"),
        # An empty grpc-encoding names no algorithm grpc-core knows (ours served it).
        ([("grpc-encoding", "")], "Error parsing 'grpc-encoding' metadata"),
        # The first field that doesn't parse is named (ours named grpc-timeout first).
        ([("x-b-bin", "!!"), ("grpc-timeout", "1x")], "Error parsing 'x-b-bin' metadata: illegal base64 encoding"),
        ([("grpc-encoding", "br"), ("x-b-bin", "!!")], "Error parsing 'grpc-encoding' metadata"),
    ],
    ids=["grpc-timeout", "binary-value", "empty-encoding", "binary-first", "encoding-first"],
)
def test_request_metadata_that_does_not_parse(extra, details):
    """An unparsable grpc-timeout or -bin value: grpcio's answer, :status
    200 and INTERNAL in its words; ours answered :status 400 in grpc-go's."""
    headers = request_headers(method("Echo"), extra=extra)
    ref, ours = both(_echo_setup, lambda run: _raw_unary(run.port, headers))
    assert ref == ("200", "13", details, b"")
    if TRANSPORT == "h2":
        assert ours == ref
    else:
        # grpc-go's words; it serves an empty grpc-encoding (README).
        assert ours[1] == ("0" if extra == [("grpc-encoding", "")] else "13")
