"""Misuse of NativeGrpcFront raises the documented exceptions, never hangs
or crashes: bad call ids, wrong argument types, bad methods and options."""

import gc
import os
import socket

import grpc
import pytest

from pygrpc_native import EVENT_CALL, NativeGrpcFront

from lowlevel_helpers import METHODS, SAY, WAIT, next_event, say, started_front, stop_front

pytestmark = pytest.mark.timeout(60)

PER_CALL = {
    "respond": lambda f, cid: f.respond(cid, b"x"),
    "send_message": lambda f, cid: f.send_message(cid, b"x"),
    "send_initial_metadata": lambda f, cid: f.send_initial_metadata(cid, [("k", "v")]),
    "finish": lambda f, cid: f.finish(cid, 0),
    "cancel": lambda f, cid: f.cancel(cid),
    "is_active": lambda f, cid: f.is_active(cid),
    "time_remaining": lambda f, cid: f.time_remaining(cid),
    "call_details": lambda f, cid: f.call_details(cid),
    "set_compression": lambda f, cid: f.set_compression(cid, "gzip"),
    "disable_next_message_compression": lambda f, cid: f.disable_next_message_compression(cid),
}


@pytest.fixture
def live_call():
    """A started front with one unanswered unary call: (front, call_id)."""
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"live", timeout=30)
        event = next_event(front)
        assert event[0] == EVENT_CALL
        yield front, event[1]
        front.respond(event[1], b"bye")
        fut.result(timeout=WAIT)


# ---------------------------------------------------------------- call ids


@pytest.mark.parametrize("name", sorted(PER_CALL))
@pytest.mark.parametrize("bad_id", [0, -1, -(2**40), "issued+1000"])
def test_unissued_call_id_raises_value_error(live_call, name, bad_id):
    front, call_id = live_call
    if bad_id == "issued+1000":
        bad_id = call_id + 1000
    with pytest.raises(ValueError):
        PER_CALL[name](front, bad_id)
    assert front.is_active(call_id) is True


@pytest.mark.parametrize("name", sorted(PER_CALL))
def test_huge_call_id_raises(live_call, name):
    front, _ = live_call
    with pytest.raises((ValueError, OverflowError)):
        PER_CALL[name](front, 2**64 + 5)


@pytest.mark.parametrize("name", sorted(PER_CALL))
def test_unissued_call_id_before_start(name):
    front = NativeGrpcFront("127.0.0.1:0", METHODS)
    with pytest.raises(ValueError):
        PER_CALL[name](front, 1)


@pytest.mark.parametrize("name", sorted(PER_CALL))
def test_call_id_of_another_front_raises_value_error(live_call, name):
    _, call_id = live_call
    with started_front() as other:
        with pytest.raises(ValueError):
            PER_CALL[name](other, call_id)


@pytest.mark.parametrize("name", sorted(PER_CALL))
@pytest.mark.parametrize("bad_id", ["1", 1.0, None, b"1"], ids=["str", "float", "None", "bytes"])
def test_call_id_of_wrong_type_raises_type_error(live_call, name, bad_id):
    front, _ = live_call
    with pytest.raises(TypeError):
        PER_CALL[name](front, bad_id)


# ---------------------------------------------------------------- payloads, codes, metadata


BAD_PAYLOADS = ["text", 5, 1.5, ["a"]]
BAD_PAYLOAD_IDS = ["str", "int", "float", "list"]


@pytest.mark.parametrize("payload", BAD_PAYLOADS + [None], ids=BAD_PAYLOAD_IDS + ["None"])
def test_respond_payload_type(live_call, payload):
    front, call_id = live_call
    with pytest.raises(TypeError):
        front.respond(call_id, payload)
    assert front.is_active(call_id) is True


@pytest.mark.parametrize("payload", BAD_PAYLOADS + [None], ids=BAD_PAYLOAD_IDS + ["None"])
def test_send_message_payload_type(live_call, payload):
    front, call_id = live_call
    with pytest.raises(TypeError):
        front.send_message(call_id, payload)
    assert front.is_active(call_id) is True


@pytest.mark.parametrize("payload", BAD_PAYLOADS, ids=BAD_PAYLOAD_IDS)
def test_finish_payload_type(live_call, payload):
    front, call_id = live_call
    with pytest.raises(TypeError):
        front.finish(call_id, 0, payload=payload)
    assert front.is_active(call_id) is True


@pytest.mark.parametrize("code", ["0", 1.0, b"0"], ids=["str", "float", "bytes"])
def test_finish_code_type(live_call, code):
    front, call_id = live_call
    with pytest.raises(TypeError):
        front.finish(call_id, code)
    assert front.is_active(call_id) is True


@pytest.mark.parametrize("details", [bytearray(b"bytes"), 5], ids=["bytearray", "int"])  # str and bytes go
def test_finish_details_type(live_call, details):
    front, call_id = live_call
    with pytest.raises(TypeError):
        front.finish(call_id, 2, details)
    assert front.is_active(call_id) is True


BAD_METADATA = {
    "str": "key",
    "int": 5,
    "value-int": [("k", 5)],
    "key-int": [(5, "v")],
    "key-None": [(None, "v")],  # bytes keys are fine, as with grpcio
}


@pytest.mark.parametrize("md", list(BAD_METADATA.values()), ids=list(BAD_METADATA))
def test_initial_metadata_type(live_call, md):
    front, call_id = live_call
    with pytest.raises(TypeError):
        front.send_initial_metadata(call_id, md)
    assert front.is_active(call_id) is True


@pytest.mark.parametrize("md", list(BAD_METADATA.values()), ids=list(BAD_METADATA))
def test_trailing_metadata_type(live_call, md):
    front, call_id = live_call
    with pytest.raises(TypeError):
        front.finish(call_id, 0, trailing_metadata=md)
    assert front.is_active(call_id) is True


def test_a_none_value_is_sent_empty(live_call):
    """As grpcio encodes it: a None value is an empty one."""
    front, call_id = live_call
    assert front.send_initial_metadata(call_id, [("k", None)]) is True


@pytest.mark.parametrize("md", [[("k",)], [("k", "v", "w")]], ids=["short", "long"])
def test_metadata_items_must_be_pairs(live_call, md):
    front, call_id = live_call
    with pytest.raises((TypeError, ValueError)):
        front.send_initial_metadata(call_id, md)


def test_call_still_answerable_after_misuse(live_call):
    """Errors raised for bad arguments leave the call alone."""
    front, call_id = live_call
    for bad in (lambda: front.respond(call_id, "s"), lambda: front.respond("x", b""), lambda: front.respond(0, b"")):
        with pytest.raises((TypeError, ValueError)):
            bad()
    assert front.is_active(call_id) is True


def test_initial_metadata_sent_twice_raises():
    """A second send_initial_metadata() on a call raises ValueError and
    sends nothing; the call goes on with the first. It returned True and
    the transport dropped it."""
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"hi", timeout=WAIT)
        _, call_id, _, _, _ = next_event(front)
        assert front.send_initial_metadata(call_id, [("first", "1")]) is True
        with pytest.raises(ValueError, match="initial metadata no longer allowed"):
            front.send_initial_metadata(call_id, [("second", "2")])
        assert front.respond(call_id, b"hi!") is True
        assert fut.result(timeout=WAIT) == b"hi!"
        assert [k for k, _ in fut.initial_metadata()] == ["first"]


@pytest.mark.parametrize("name", ["br", "GZIP", "identity", 5])
def test_unknown_compression_name(live_call, name):
    front, call_id = live_call
    with pytest.raises((ValueError, TypeError)):
        front.set_compression(call_id, name)
    assert front.is_active(call_id) is True


# ---------------------------------------------------------------- recv_batch arguments


def test_recv_batch_argument_types():
    with started_front() as front:
        with pytest.raises(TypeError):
            front.recv_batch("10")
        with pytest.raises(TypeError):
            front.recv_batch(10, "1")
        with pytest.raises(TypeError):
            front.recv_batch(None)
        for bad in (0, -1):
            with pytest.raises(ValueError):
                front.recv_batch(bad, 0.1)
        with pytest.raises(ValueError):
            front.recv_batch(1, -1)
        assert front.recv_batch(10, 0) == []
        assert front.recv_batch(10, 0.05) == []
        assert front.recv_batch(10, 0.05) == []


def test_recv_batch_timeout_waits_about_that_long():
    import time

    with started_front() as front:
        t0 = time.monotonic()
        assert front.recv_batch(10, 0.3) == []
        took = time.monotonic() - t0
        assert 0.25 <= took < 2, took


def test_recv_batch_respects_max_events():
    from lowlevel_helpers import wait_until

    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        futs = [say(ch).future(b"%d" % i, timeout=30) for i in range(5)]
        wait_until(lambda: front.metrics()["events_queued"] == 5, what="5 queued events")
        first = front.recv_batch(2, WAIT)
        assert len(first) == 2
        rest = front.recv_batch(10, WAIT)
        assert len(rest) == 3
        assert front.recv_batch(10, 0.1) == []
        events = first + rest
        assert sorted(e[3] for e in events) == [b"%d" % i for i in range(5)]
        for e in events:
            front.respond(e[1], e[3])
        assert sorted(f.result(timeout=WAIT) for f in futs) == [b"%d" % i for i in range(5)]


# ---------------------------------------------------------------- construction


def test_address_must_be_str():
    with pytest.raises(TypeError):
        NativeGrpcFront(12345, METHODS)
    with pytest.raises(TypeError):
        NativeGrpcFront(b"127.0.0.1:0", METHODS)


# (An address without a port binds 443, as grpc-core binds it: docs/low-level-api.md.)
@pytest.mark.parametrize("address", ["127.0.0.1:notaport", "127.0.0.1:99999", "[::1", ""])
def test_bad_address_fails_naming_it(address):
    try:
        front = NativeGrpcFront(address, METHODS)
    except ValueError as exc:
        assert address in str(exc) or "address" in str(exc)
        return
    try:
        with pytest.raises((OSError, ValueError)) as info:
            front.start()
        assert address in str(info.value)
    finally:
        stop_front(front, timeout=5)


@pytest.mark.parametrize("target", ["localhost", "http://localhost:8080", "localhost:0", "127.0.0.1:http"])
def test_a_fallback_that_names_no_server_is_refused(target):
    """grpc-go takes nearly any string as a target, so these showed only
    as UNAVAILABLE on the calls relayed to them."""
    with pytest.raises(ValueError, match=f"fallback {target!r}".replace("'", '"')):
        NativeGrpcFront("127.0.0.1:0", METHODS, fallback=target)


@pytest.mark.parametrize(
    "methods",
    [5, None, [SAY], [(SAY,)], [(SAY, False, "extra")], [(123, False)], [(b"/echo.Echo/Say", False)]],
    ids=["int", "None", "bare-path", "one-item", "three-items", "int-path", "bytes-path"],
)
def test_bad_methods_list(methods):
    with pytest.raises((TypeError, ValueError)):
        NativeGrpcFront("127.0.0.1:0", methods)


@pytest.mark.parametrize("path", ["", "/echo.Echo/Say\n", "/echo\x00"], ids=["empty", "newline", "nul"])
def test_bad_method_path_raises_value_error(path):
    with pytest.raises(ValueError):
        NativeGrpcFront("127.0.0.1:0", [(path, False)])
    front = NativeGrpcFront("127.0.0.1:0", [])
    with pytest.raises(ValueError):
        front.add_method(path, False)


@pytest.mark.parametrize("path", ["//Say", "/echo.Echo/", "noslash", "echo.Echo/Say", "/echo.Echo", "/"])
def test_any_method_path_a_client_can_send_is_accepted(path):
    # grpcio serves whatever :path a client sends (empty names, no leading
    # "/"), and so does the front's own transport.
    front = NativeGrpcFront("127.0.0.1:0", [(path, False)])
    assert front.add_method(path, False) == 0


def test_duplicate_method_path_raises_value_error():
    with pytest.raises(ValueError):
        NativeGrpcFront("127.0.0.1:0", [(SAY, False), (SAY, True)])


def test_methods_accepts_any_sequence():
    for methods in ([(SAY, False)], ((SAY, False),), [[SAY, False]], iter([(SAY, False)])):
        try:
            front = NativeGrpcFront("127.0.0.1:0", methods)
        except TypeError:
            if isinstance(methods, type(iter([]))):
                continue  # an iterator is not a sequence; refusing it is fine
            raise
        del front


@pytest.mark.parametrize(
    "option",
    [("grpc.default_compression_algorithm", 3), ("grpc.default_compression_level", 4), ("grpc.default_compression_level", -1)],
    ids=["algorithm", "level", "negative-level"],
)
def test_unknown_compression_raises_value_error_naming_it(option):
    with pytest.raises(ValueError) as info:
        NativeGrpcFront("127.0.0.1:0", METHODS, options=[option])
    assert option[0] in str(info.value)


@pytest.mark.parametrize(
    "options",
    [5, "grpc.x", [("only-name",)], [5], [(5, 1)]],
    ids=["int", "str", "one-item", "not-pair", "int-name"],
)
def test_bad_options_shape(options):
    with pytest.raises((TypeError, ValueError)):
        NativeGrpcFront("127.0.0.1:0", METHODS, options=options)


@pytest.mark.parametrize("tokens", [["token"], "token", 5], ids=["list", "str", "int"])
def test_bearer_tokens_must_be_a_mapping(tokens):
    with pytest.raises((TypeError, ValueError)):
        NativeGrpcFront("127.0.0.1:0", METHODS, bearer_tokens=tokens)


@pytest.mark.parametrize("tokens", [{"token": 5}, {5: "key"}, {b"t": "key"}], ids=["int-key", "int-token", "bytes-token"])
def test_bearer_tokens_must_map_str_to_str(tokens):
    with pytest.raises(TypeError):
        NativeGrpcFront("127.0.0.1:0", METHODS, bearer_tokens=tokens)


def test_unknown_and_client_only_options_are_ignored():
    opts = [
        ("grpc.some_option_nobody_knows", 1),
        ("grpc.primary_user_agent", "ua"),
        ("grpc.http2.max_frame_size", 16384),
        ("grpc.enable_retries", 0),
    ]
    with started_front(options=opts) as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"x", timeout=WAIT)
        e = next_event(front)
        front.respond(e[1], b"y")
        assert fut.result(timeout=WAIT) == b"y"


@pytest.mark.parametrize("code", [-1, 17, 2**40])
def test_finish_code_out_of_range_raises_value_error(live_call, code):
    front, call_id = live_call
    with pytest.raises((ValueError, OverflowError)):
        front.finish(call_id, code, "bad code")
    assert front.is_active(call_id) is True


# ---------------------------------------------------------------- event_fd


def test_a_closed_event_fd_is_named_and_harms_nothing_else():
    # event_fd() is the front's own; closed by mistake, recv_batch names it
    # (it used to poll a dead number, and Go read whatever file took the
    # number next). A file that then takes the number is the user's: the
    # front neither reads it nor closes it when collected.
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fd = front.event_fd()
        os.close(fd)
        with pytest.raises(RuntimeError, match=f"event descriptor {fd} was closed"):
            front.recv_batch(8, 0.5)
        a, b = socket.socketpair()
        try:
            fut = say(ch).future(b"x", timeout=WAIT)
            event = next_event(front)  # a blocking socket holds the old number, perhaps: no hang
            front.respond(event[1], b"ok")
            assert fut.result(timeout=WAIT) == b"ok"
        except BaseException:
            a.close()
            b.close()
            raise
    del front
    gc.collect()
    try:
        for sock in (a, b):
            os.fstat(sock.fileno())  # still open: not closed as the front's
    finally:
        a.close()
        b.close()
