"""Calls through NativeGrpcFront from real grpcio clients: unary and
server-streaming answers, metadata both ways, status codes and details,
compression, unknown methods and listen addresses."""

import os
import socket
import threading
import time

import grpc
import pytest

from pygrpc_native import EVENT_CALL, EVENT_CANCEL, NativeGrpcFront

from lowlevel_helpers import (
    COUNT,
    COUNT_ID,
    SAY,
    SAY_ID,
    WAIT,
    count,
    echo,
    metadata_values,
    next_event,
    say,
    serving,
    started_front,
    wait_until,
)

pytestmark = pytest.mark.timeout(60)

STREAM_CODES = [c for c in grpc.StatusCode if c is not grpc.StatusCode.OK]


def counting(front, event):
    """Handler: Say echoes; Count sends int(request) messages "i:<n>"."""
    kind, call_id, method_id, payload, _ = event
    if kind != EVENT_CALL:
        return
    if method_id == SAY_ID:
        front.respond(call_id, payload)
        return
    for i in range(int(payload)):
        assert front.send_message(call_id, b"i:%d" % i)
    front.finish(call_id)


# ---------------------------------------------------------------- unary


def test_unary_echo_payloads():
    payloads = [
        b"",
        b"hello",
        bytes(range(256)),
        b"\x00" * 17,
        os.urandom(64 * 1024),
        os.urandom(3 << 20),  # under grpcio's default 4 MiB limits both ways
    ]
    with serving() as s, s.channel() as ch:
        for p in payloads:
            assert say(ch)(p, timeout=WAIT) == p
    calls = s.log.calls()
    assert [e[3] for e in calls] == payloads
    assert all(e[2] == SAY_ID for e in calls)
    assert len({e[1] for e in calls}) == len(payloads), "call ids must be unique"


def test_unary_many_sequential_calls():
    with serving() as s, s.channel() as ch:
        stub = say(ch)
        for i in range(300):
            req = b"req-%d" % i
            assert stub(req, timeout=WAIT) == req


def test_method_ids_follow_the_methods_list():
    methods = [("/a.A/One", False), ("/b.B/Two", True), ("/a.A/Three", False)]

    def handler(front, event):
        kind, call_id, method_id, payload, _ = event
        if kind != EVENT_CALL:
            return
        if method_id == 1:
            front.send_message(call_id, b"m1")
            front.finish(call_id)
        else:
            front.respond(call_id, b"m%d" % method_id)

    with serving(handler, methods) as s, s.channel() as ch:
        assert ch.unary_unary("/a.A/One")(b"", timeout=WAIT) == b"m0"
        assert list(ch.unary_stream("/b.B/Two")(b"", timeout=WAIT)) == [b"m1"]
        assert ch.unary_unary("/a.A/Three")(b"", timeout=WAIT) == b"m2"


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "memoryview-slice"])
def test_respond_accepts_bytes_like(kind):
    def make(p):
        if kind == "bytes":
            return bytes(p)
        if kind == "bytearray":
            return bytearray(p)
        if kind == "memoryview":
            return memoryview(bytes(p))
        return memoryview(b"<<" + p + b">>")[2:-2]

    def handler(front, event):
        if event[0] == EVENT_CALL:
            if event[2] == SAY_ID:
                assert front.respond(event[1], make(event[3]))
            else:
                assert front.send_message(event[1], make(event[3]))
                assert front.finish(event[1], 0, payload=make(b"end"))

    with serving(handler) as s, s.channel() as ch:
        assert say(ch)(b"bytes-like", timeout=WAIT) == b"bytes-like"
        assert list(count(ch)(b"first", timeout=WAIT)) == [b"first", b"end"]


def test_answer_from_another_thread_later():
    """Calls can be answered from any thread, after recv_batch returned."""

    def handler(front, event):
        if event[0] == EVENT_CALL:
            threading.Timer(0.2, front.respond, (event[1], event[3] + b"!")).start()

    with serving(handler) as s, s.channel() as ch:
        futures = [say(ch).future(b"%d" % i, timeout=WAIT) for i in range(20)]
        assert [f.result(timeout=WAIT) for f in futures] == [b"%d!" % i for i in range(20)]


def test_respond_after_the_call_ended_returns_false():
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"once", timeout=WAIT)
        _, call_id, _, _, _ = next_event(front)
        assert front.is_active(call_id) is True
        assert front.respond(call_id, b"first") is True
        assert fut.result(timeout=WAIT) == b"first"
        wait_until(lambda: not front.is_active(call_id), what="call to end")
        assert front.respond(call_id, b"second") is False
        assert front.send_message(call_id, b"x") is False
        assert front.send_initial_metadata(call_id, [("k", "v")]) is False
        assert front.finish(call_id, 0) is False
        assert front.cancel(call_id) is False
        assert front.is_active(call_id) is False


# ---------------------------------------------------------------- streaming


def test_server_streaming():
    with serving(counting) as s, s.channel() as ch:
        call = count(ch)(b"5", timeout=WAIT)
        assert list(call) == [b"i:%d" % i for i in range(5)]
        assert call.code() == grpc.StatusCode.OK
        assert list(count(ch)(b"0", timeout=WAIT)) == []
    assert [e[2] for e in s.log.calls()] == [COUNT_ID, COUNT_ID]


def test_server_streaming_many_messages_keep_order():
    """More messages than fit in any buffer: send_message must wait for
    room (flow control), not drop messages or fail."""
    with serving(counting) as s, s.channel() as ch:
        got = list(count(ch)(b"3000", timeout=30))
        assert got == [b"i:%d" % i for i in range(3000)]


def test_server_streaming_large_messages_slow_reader():
    big = os.urandom(256 * 1024)

    def handler(front, event):
        if event[0] == EVENT_CALL:
            for _ in range(40):
                assert front.send_message(event[1], big)
            front.finish(event[1])

    with serving(handler) as s, s.channel() as ch:
        n = 0
        for msg in count(ch)(b"", timeout=30):
            assert msg == big
            n += 1
            if n % 10 == 0:
                time.sleep(0.05)
        assert n == 40


def test_server_streaming_finish_with_last_payload_and_trailers():
    def handler(front, event):
        if event[0] == EVENT_CALL:
            assert front.send_message(event[1], b"a")
            assert front.finish(event[1], 0, payload=b"last", trailing_metadata=[("x-done", "yes")])

    with serving(handler) as s, s.channel() as ch:
        call = count(ch)(b"", timeout=WAIT)
        assert list(call) == [b"a", b"last"]
        assert call.code() == grpc.StatusCode.OK
        assert metadata_values(call.trailing_metadata(), "x-done") == ["yes"]


def test_server_streaming_error_after_messages():
    def handler(front, event):
        if event[0] == EVENT_CALL:
            front.send_message(event[1], b"one")
            front.send_message(event[1], b"two")
            front.finish(event[1], grpc.StatusCode.NOT_FOUND.value[0], "ran out")

    with serving(handler) as s, s.channel() as ch:
        got = []
        with pytest.raises(grpc.RpcError) as info:
            for m in count(ch)(b"", timeout=WAIT):
                got.append(m)
        assert got == [b"one", b"two"]
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert info.value.details() == "ran out"


def test_unary_finish_with_payload():
    def handler(front, event):
        if event[0] == EVENT_CALL:
            front.finish(event[1], 0, payload=b"via finish")

    with serving(handler) as s, s.channel() as ch:
        assert say(ch)(b"", timeout=WAIT) == b"via finish"


def test_error_status_does_not_send_payload():
    def handler(front, event):
        if event[0] == EVENT_CALL:
            front.finish(event[1], grpc.StatusCode.ABORTED.value[0], "no", payload=b"ignored")

    with serving(handler) as s, s.channel() as ch:
        with pytest.raises(grpc.RpcError) as info:
            say(ch)(b"", timeout=WAIT)
        assert info.value.code() == grpc.StatusCode.ABORTED
        assert info.value.details() == "no"


# ---------------------------------------------------------------- status


def test_every_status_code_reaches_the_client():
    def handler(front, event):
        if event[0] == EVENT_CALL:
            code = int(event[3])
            front.finish(event[1], code, f"code {code}")

    with serving(handler) as s, s.channel() as ch:
        for code in STREAM_CODES:
            with pytest.raises(grpc.RpcError) as info:
                say(ch)(b"%d" % code.value[0], timeout=WAIT)
            assert info.value.code() == code
            assert info.value.details() == f"code {code.value[0]}"


@pytest.mark.parametrize(
    "details",
    [
        "héllo ✓ 世界",
        "  leading and trailing spaces  ",
        "100% sure, %41 is not A",
        "emoji 🎉 and accents àéîõü",
        "line one\nline two\ttab",
        "x" * 4000,
    ],
    ids=["unicode", "spaces", "percent", "emoji", "control", "long"],
)
@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "stream"])
def test_details_round_trip(details, streaming):
    def handler(front, event):
        if event[0] == EVENT_CALL:
            front.finish(event[1], grpc.StatusCode.INVALID_ARGUMENT.value[0], details=details)

    with serving(handler) as s, s.channel() as ch:
        with pytest.raises(grpc.RpcError) as info:
            if streaming:
                list(count(ch)(b"", timeout=WAIT))
            else:
                say(ch)(b"", timeout=WAIT)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == details


def test_error_status_without_details():
    def handler(front, event):
        if event[0] == EVENT_CALL:
            front.finish(event[1], grpc.StatusCode.NOT_FOUND.value[0])

    with serving(handler) as s, s.channel() as ch:
        with pytest.raises(grpc.RpcError) as info:
            say(ch)(b"", timeout=WAIT)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert not info.value.details()


def test_response_metadata_value_types():
    """str values on -bin keys go out as their UTF-8 bytes; bytes values on
    plain keys go out as text."""

    def handler(front, event):
        if event[0] == EVENT_CALL:
            front.send_initial_metadata(event[1], [("x-plain", b"from-bytes"), ("x-text-bin", "from str")])
            front.finish(event[1], 0, payload=b"ok")

    with serving(handler) as s, s.channel() as ch:
        resp, call = say(ch).with_call(b"", timeout=WAIT)
        assert resp == b"ok"
        md = call.initial_metadata()
    assert metadata_values(md, "x-plain") == ["from-bytes"]
    assert metadata_values(md, "x-text-bin") == [b"from str"]


def test_server_cancel_unary():
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"", timeout=WAIT)
        _, call_id, _, _, _ = next_event(front)
        assert front.cancel(call_id) is True
        with pytest.raises(grpc.RpcError) as info:
            fut.result(timeout=WAIT)
        assert info.value.code() == grpc.StatusCode.CANCELLED
        wait_until(lambda: not front.is_active(call_id), what="call to end")
        assert front.respond(call_id, b"late") is False


def test_server_cancel_streaming_midway():
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        call = count(ch)(b"", timeout=WAIT)
        _, call_id, _, _, _ = next_event(front)
        assert front.send_message(call_id, b"first")
        assert next(call) == b"first"
        assert front.cancel(call_id) is True
        with pytest.raises(grpc.RpcError) as info:
            next(call)
        assert info.value.code() == grpc.StatusCode.CANCELLED
        wait_until(lambda: not front.is_active(call_id), what="call to end")


# ---------------------------------------------------------------- metadata


def test_invocation_metadata_and_call_details():
    seen = {}

    def handler(front, event):
        if event[0] == EVENT_CALL:
            seen["details"] = front.call_details(event[1])
            seen["remaining"] = front.time_remaining(event[1])
            seen["event"] = event
            front.respond(event[1], b"ok")

    md = (
        ("x-text", "hello"),
        ("x-multi", "a"),
        ("x-multi", "b"),
        ("x-data-bin", b"\x00\x01\xfe\xff"),
    )
    with serving(handler) as s, s.channel() as ch:
        assert say(ch)(b"", metadata=md, timeout=30) == b"ok"
        port = s.port
    d = seen["details"]
    assert d["method"] == SAY
    inv = d["invocation_metadata"]
    assert isinstance(inv, tuple)
    assert all(isinstance(kv, tuple) and len(kv) == 2 for kv in inv)
    assert metadata_values(inv, "x-text") == ["hello"]
    assert metadata_values(inv, "x-multi") == ["a", "b"]
    assert metadata_values(inv, "x-data-bin") == [b"\x00\x01\xfe\xff"]
    assert all(type(v) is (bytes if k.endswith("-bin") else str) for k, v in inv)
    keys = {k for k, _ in inv}
    assert not any(k.startswith(":") for k in keys), keys
    assert not {"grpc-timeout", "content-type", "te"} & keys, keys
    assert metadata_values(inv, "user-agent") and "grpc-python" in metadata_values(inv, "user-agent")[0]
    assert d["authority"] == f"127.0.0.1:{port}"
    assert d["peer"].startswith("ipv4:127.0.0.1:")
    assert int(d["peer"].rsplit(":", 1)[1]) > 0
    assert d["client_key"] == d["peer"] == seen["event"][4]
    assert 20 < d["time_remaining"] <= 30.5  # grpcio clients round the timeout header up
    assert 20 < seen["remaining"] <= 30.5


def test_call_details_after_the_call_ended():
    """An answered call's details are gone (LookupError); one that ended
    before it was answered (here the client cancelled) keeps them for a
    handler still running, as grpcio's contexts still answer then."""
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        answered = say(ch).future(b"", timeout=20)
        _, answered_id, _, _, _ = next_event(front)
        front.respond(answered_id, b"ok")
        assert answered.result(timeout=WAIT) == b"ok"
        with pytest.raises(LookupError, match="has ended"):
            front.call_details(answered_id)
        cancelled = say(ch).future(b"", timeout=20, metadata=(("x-who", "me"),))
        _, call_id, _, _, _ = next_event(front)
        cancelled.cancel()
        wait_until(lambda: not front.is_active(call_id), what="call to end")
        details = front.call_details(call_id)
        assert metadata_values(details["invocation_metadata"], "x-who") == ["me"]
        assert details["peer"].startswith("ipv4:127.0.0.1:")
        assert 15 < details["time_remaining"] <= 20.5
        assert front.time_remaining(call_id) == 0.0  # the call itself is over
        assert front.respond(call_id, b"late") is False


def test_no_deadline_means_time_remaining_none():
    seen = {}

    def handler(front, event):
        if event[0] == EVENT_CALL:
            seen["remaining"] = front.time_remaining(event[1])
            seen["details"] = front.call_details(event[1])["time_remaining"]
            front.respond(event[1], b"ok")

    with serving(handler) as s, s.channel() as ch:
        fut = say(ch).future(b"")  # no timeout: no deadline
        assert fut.result(timeout=WAIT) == b"ok"
    assert seen == {"remaining": None, "details": None}


def test_time_remaining_counts_down():
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"", timeout=20)
        _, call_id, _, _, _ = next_event(front)
        first = front.time_remaining(call_id)
        time.sleep(0.3)
        second = front.time_remaining(call_id)
        assert isinstance(first, float)
        assert 0 < second < first <= 20.5  # grpcio clients round the timeout header up
        assert first - second >= 0.25
        front.respond(call_id, b"")
        fut.result(timeout=WAIT)


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "stream"])
def test_initial_and_trailing_metadata_to_client(streaming):
    initial = [("x-init", "i1"), ("x-init-bin", b"\x00\xffbin")]
    trailing = [("x-trail", "t1"), ("x-trail", "t2"), ("x-trail-bin", b"\x01\x02")]

    def handler(front, event):
        if event[0] == EVENT_CALL:
            assert front.send_initial_metadata(event[1], initial)
            if streaming:
                assert front.send_message(event[1], b"m")
            assert front.finish(event[1], 0, trailing_metadata=trailing, payload=b"r")

    with serving(handler) as s, s.channel() as ch:
        if streaming:
            call = count(ch)(b"", timeout=WAIT)
            assert list(call) == [b"m", b"r"]
        else:
            resp, call = say(ch).with_call(b"", timeout=WAIT)
            assert resp == b"r"
        im, tm = call.initial_metadata(), call.trailing_metadata()
    assert metadata_values(im, "x-init") == ["i1"]
    assert metadata_values(im, "x-init-bin") == [b"\x00\xffbin"]
    assert metadata_values(tm, "x-trail") == ["t1", "t2"]
    assert metadata_values(tm, "x-trail-bin") == [b"\x01\x02"]


def test_trailing_metadata_with_error_status():
    def handler(front, event):
        if event[0] == EVENT_CALL:
            front.finish(
                event[1],
                grpc.StatusCode.FAILED_PRECONDITION.value[0],
                "not yet",
                trailing_metadata=(("x-reason", "busy"), ("x-reason-bin", b"\x00\x07")),
            )

    with serving(handler) as s, s.channel() as ch:
        with pytest.raises(grpc.RpcError) as info:
            say(ch)(b"", timeout=WAIT)
        e = info.value
        assert e.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert e.details() == "not yet"
        assert metadata_values(e.trailing_metadata(), "x-reason") == ["busy"]
        assert metadata_values(e.trailing_metadata(), "x-reason-bin") == [b"\x00\x07"]


BAD_KEYS = ["Upper-Case", "has space", "bad:colon", ""]


@pytest.mark.parametrize("key", BAD_KEYS, ids=["upper", "space", "colon", "empty"])
@pytest.mark.parametrize("where", ["initial", "trailing"])
def test_bad_response_metadata_key_ends_call_with_internal(key, where):
    with started_front() as front, grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        fut = say(ch).future(b"", timeout=WAIT)
        _, call_id, _, _, _ = next_event(front)
        # The call ends with grpcio's INTERNAL "Invalid metadata", and the
        # Python side is told why.
        with pytest.raises(ValueError, match="INTERNAL"):
            if where == "initial":
                front.send_initial_metadata(call_id, [(key, "v")])
            else:
                front.finish(call_id, 0, trailing_metadata=[(key, "v")], payload=b"should not arrive")
        assert front.respond(call_id, b"should not arrive") in (True, False)
        with pytest.raises(grpc.RpcError) as info:
            fut.result(timeout=WAIT)
        assert info.value.code() == grpc.StatusCode.INTERNAL
        assert info.value.details() == "Invalid metadata"
        wait_until(lambda: not front.is_active(call_id), what="call to end")


# ---------------------------------------------------------------- unknown methods, compression


@pytest.mark.parametrize("path", ["/echo.Echo/Nope", "/other.Service/Say", "/echo.Echo/say"])
def test_unknown_method_is_unimplemented(path):
    with serving() as s, s.channel() as ch:
        with pytest.raises(grpc.RpcError) as info:
            ch.unary_unary(path)(b"x", timeout=WAIT)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert info.value.details() == "Method not found!"
        with pytest.raises(grpc.RpcError) as info:
            list(ch.unary_stream(path)(b"x", timeout=WAIT))
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert say(ch)(b"still fine", timeout=WAIT) == b"still fine"
    assert [e[3] for e in s.log.snapshot()] == [b"still fine"], "unknown methods must not reach Python"


def test_gzip_compressed_requests():
    payload = b"compress me " * 5000
    with serving(counting) as s:
        with s.channel() as ch:
            assert say(ch)(payload, timeout=WAIT, compression=grpc.Compression.Gzip) == payload
        with grpc.insecure_channel(s.target, compression=grpc.Compression.Gzip) as ch:
            assert say(ch)(payload, timeout=WAIT) == payload
            assert list(count(ch)(b"3", timeout=WAIT)) == [b"i:0", b"i:1", b"i:2"]
    assert [e[3] for e in s.log.calls()] == [payload, payload, b"3"]


# ---------------------------------------------------------------- addresses


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(
    "address,target",
    [
        ("127.0.0.1:0", "127.0.0.1:{port}"),
        ("0.0.0.0:0", "127.0.0.1:{port}"),
        ("localhost:0", "localhost:{port}"),
        ("[::]:0", "127.0.0.1:{port}"),
        ("[::1]:0", "[::1]:{port}"),
    ],
)
def test_listen_addresses(address, target):
    if "::" in address and not socket.has_ipv6:
        pytest.skip("no IPv6")
    seen = {}

    def handler(front, event):
        if event[0] == EVENT_CALL:
            seen["peer"] = front.call_details(event[1])["peer"]
            front.respond(event[1], event[3])

    with serving(handler, address=address) as s:
        assert 0 < s.port < 65536
        with grpc.insecure_channel(target.format(port=s.port)) as ch:
            assert say(ch)(b"addr", timeout=WAIT) == b"addr"
    if address == "[::1]:0":
        assert seen["peer"].startswith("ipv6:%5B::1%5D:"), seen["peer"]  # grpcio percent-encodes the brackets
    elif address == "127.0.0.1:0":
        assert seen["peer"].startswith("ipv4:127.0.0.1:"), seen["peer"]


def test_explicit_port():
    port = _free_port()
    with serving(address=f"127.0.0.1:{port}") as s, s.channel() as ch:
        assert s.port == port
        assert say(ch)(b"p", timeout=WAIT) == b"p"


def test_two_fronts_in_one_process():
    with serving() as a, serving(counting) as b, a.channel() as cha, b.channel() as chb:
        assert a.port != b.port
        assert say(cha)(b"a", timeout=WAIT) == b"a"
        assert list(count(chb)(b"2", timeout=WAIT)) == [b"i:0", b"i:1"]
    assert len(a.log.calls()) == 1 and len(b.log.calls()) == 1


# ---------------------------------------------------------------- buffers and odd requests


def test_held_request_payloads_stay_intact():
    """Payloads handed to Python are Python's own: holding many events while
    more calls arrive must not let buffers be reused under them."""
    import hashlib

    def make(i):
        body = os.urandom(1000 + (i * 37) % 9000)
        return hashlib.sha256(body).digest() + body

    n = 300
    with started_front() as front:
        channels = [
            grpc.insecure_channel(f"127.0.0.1:{front.port}", options=[("grpc.use_local_subchannel_pool", 1)])
            for _ in range(3)
        ]
        try:
            requests = [make(i) for i in range(n)]
            futures = [say(channels[i % 3]).future(r, timeout=60) for i, r in enumerate(requests)]
            events = []
            deadline = time.monotonic() + 30
            while len(events) < n and time.monotonic() < deadline:
                events.extend(front.recv_batch(64, 1.0))
            assert len(events) == n
            time.sleep(0.2)
            for e in events:
                digest, body = e[3][:32], e[3][32:]
                assert hashlib.sha256(body).digest() == digest, "a held request payload changed"
            assert sorted(e[3] for e in events) == sorted(requests)
            for e in events:
                front.respond(e[1], e[3][:32])
            for r, f in zip(requests, futures):
                assert f.result(timeout=WAIT) == r[:32]
        finally:
            for ch in channels:
                ch.close()


@pytest.mark.parametrize("kind", ["bytearray", "memoryview-of-bytearray"])
def test_answer_buffers_are_copied_before_the_method_returns(kind):
    """A mutable buffer may be reused as soon as respond/send_message
    returns: the client must see what it held at the time of the call."""

    def handler(front, event):
        if event[0] != EVENT_CALL:
            return
        buf = bytearray(b"A" * 100_000)
        view = buf if kind == "bytearray" else memoryview(buf)
        for i in range(10):
            buf[:] = bytes([65 + i]) * len(buf)
            assert front.send_message(event[1], view)
        buf[:] = b"Z" * len(buf)
        assert front.finish(event[1], 0, payload=view)
        buf[:] = b"!" * len(buf)

    with serving(handler) as s, s.channel() as ch:
        got = list(count(ch)(b"", timeout=30))
    assert [m[:1] * len(m) == m for m in got] == [True] * 11
    assert [m[:1] for m in got] == [bytes([65 + i]) for i in range(10)] + [b"Z"]


@pytest.mark.parametrize("path", [SAY, COUNT])
def test_call_without_a_request_message_never_reaches_python(path):
    """A client-streaming client that sends no message to a unary or
    server-streaming method: grpcio answers UNIMPLEMENTED ("... requires
    exactly one request message."), and Python must see nothing."""
    with serving() as s, s.channel() as ch:
        with pytest.raises(grpc.RpcError) as info:
            if path == SAY:
                ch.stream_unary(path)(iter([]), timeout=WAIT)
            else:
                list(ch.stream_stream(path)(iter([]), timeout=WAIT))
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED, (info.value.code(), info.value.details())
    assert s.log.snapshot() == []


def test_stop_from_the_serving_thread():
    """A handler may stop the front from the serving thread itself (e.g. on
    a shutdown request) after answering; the thread then sees None."""

    def handler(front, event):
        if event[0] == EVENT_CALL:
            front.respond(event[1], b"bye")
            if event[3] == b"shutdown":
                front.stop(1)

    with serving(handler) as s, s.channel() as ch:
        assert say(ch)(b"shutdown", timeout=WAIT) == b"bye"
        s.join()
        with pytest.raises(grpc.RpcError) as info:
            say(ch)(b"after", timeout=3)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
