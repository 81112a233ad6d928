"""ordered=True: events of calls from one connection keep their arrival
order, however the native side schedules them."""

import grpc
import pytest

from pygrpc_native import EVENT_CALL

from lowlevel_helpers import WAIT, count, echo, say, serving

pytestmark = pytest.mark.timeout(120)

N = 500


def _warm_up(ch, metadata=None):
    """grpcio itself reorders calls that it queued while the channel was
    still connecting (measured: their HTTP/2 streams go out shuffled), so
    every test connects first and only then sends back to back."""
    grpc.channel_ready_future(ch).result(timeout=WAIT)
    assert say(ch)(b"warm-up", metadata=metadata, timeout=WAIT) == b"warm-up"


def _calls(s):
    return [e for e in s.log.calls() if e[3] != b"warm-up"]


def _send_back_to_back(s, n=N, streaming_every=0):
    with s.channel() as ch:
        _warm_up(ch)
        futures = []
        for i in range(n):
            payload = b"%d" % i
            if streaming_every and i % streaming_every == 0:
                futures.append((payload, True, count(ch)(payload, timeout=60)))
            else:
                futures.append((payload, False, say(ch).future(payload, timeout=60)))
        for payload, streaming, f in futures:
            if streaming:
                assert list(f) == [payload]
            else:
                assert f.result(timeout=60) == payload
    return [e[3] for e in _calls(s)]


def stream_echo(front, event):
    if event[0] == EVENT_CALL:
        if event[2] == 0:
            front.respond(event[1], event[3])
        else:
            front.finish(event[1], 0, payload=event[3])


@pytest.mark.parametrize("batch", [1, 64])
def test_ordered_keeps_arrival_order_of_one_connection(batch):
    with serving(echo, ordered=True, batch=batch) as s:
        order = _send_back_to_back(s)
    assert order == [b"%d" % i for i in range(N)]


def test_ordered_keeps_order_across_unary_and_streaming_methods():
    with serving(stream_echo, ordered=True) as s:
        order = _send_back_to_back(s, streaming_every=3)
    assert order == [b"%d" % i for i in range(N)]


def test_ordered_with_bearer_tokens():
    tokens = {"tok": "client-a"}
    md = (("authorization", "Bearer tok"),)
    with serving(echo, ordered=True, bearer_tokens=tokens) as s, s.channel() as ch:
        _warm_up(ch, md)
        futures = [say(ch).future(b"%d" % i, metadata=md, timeout=60) for i in range(200)]
        # A refused call in the middle must not hold back the ones after it.
        with pytest.raises(grpc.RpcError):
            say(ch)(b"no token", timeout=WAIT)
        futures += [say(ch).future(b"%d" % i, metadata=md, timeout=60) for i in range(200, 300)]
        assert [f.result(timeout=60) for f in futures] == [b"%d" % i for i in range(300)]
    calls = _calls(s)
    assert [e[3] for e in calls] == [b"%d" % i for i in range(300)]
    assert {e[4] for e in calls} == {"client-a"}


def test_ordered_call_cancelled_before_python_saw_it_does_not_block_others():
    with serving(echo, ordered=True) as s, s.channel() as ch:
        _warm_up(ch)
        futures = [say(ch).future(b"%d" % i, timeout=60) for i in range(100)]
        futures[50].cancel()
        for i, f in enumerate(futures):
            if i != 50:
                assert f.result(timeout=60) == b"%d" % i
    order = [int(e[3]) for e in _calls(s)]
    assert order == sorted(order)


def test_ordered_unknown_method_does_not_block_others():
    with serving(echo, ordered=True) as s, s.channel() as ch:
        _warm_up(ch)
        futures = [say(ch).future(b"%d" % i, timeout=60) for i in range(50)]
        bad = ch.unary_unary("/echo.Echo/Nope").future(b"bad", timeout=WAIT)
        futures += [say(ch).future(b"%d" % i, timeout=60) for i in range(50, 100)]
        with pytest.raises(grpc.RpcError) as info:
            bad.result(timeout=WAIT)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert [f.result(timeout=60) for f in futures] == [b"%d" % i for i in range(100)]
    assert [e[3] for e in _calls(s)] == [b"%d" % i for i in range(100)]
