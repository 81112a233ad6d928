"""Bearer tokens: calls without a listed token never reach Python."""

import grpc
import pytest

from pygrpc_native import EVENT_CALL

from lowlevel_helpers import WAIT, count, say, serving

pytestmark = pytest.mark.timeout(60)

TOKENS = {"s3cret-token": "alice", "other-token": "bob"}


def keyed(front, event):
    """Handler: answers with the call's client key, as seen in the event
    and in call_details."""
    kind, call_id, method_id, _, client_key = event
    if kind != EVENT_CALL:
        return
    details_key = front.call_details(call_id)["client_key"]
    answer = f"{client_key}|{details_key}".encode()
    if method_id == 0:
        front.respond(call_id, answer)
    else:
        front.finish(call_id, 0, payload=answer)


@pytest.mark.parametrize(
    "metadata",
    [
        None,
        (("authorization", "Bearer wrong-token"),),
        (("authorization", "s3cret-token"),),
        (("authorization", "Basic s3cret-token"),),
        (("authorization", "Bearer s3cret-token-but-longer"),),
        (("authorization", "Bearer "),),
        (("x-token", "Bearer s3cret-token"),),
    ],
    ids=["missing", "wrong", "no-scheme", "basic", "prefix", "empty", "other-header"],
)
def test_calls_without_a_listed_token_are_unauthenticated(metadata):
    with serving(keyed, bearer_tokens=TOKENS) as s, s.channel() as ch:
        with pytest.raises(grpc.RpcError) as info:
            say(ch)(b"x", metadata=metadata, timeout=WAIT)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as info:
            list(count(ch)(b"x", metadata=metadata, timeout=WAIT))
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert s.front.metrics()["calls_refused"] >= 2
        assert s.front.metrics()["calls_started"] == 0
    assert s.log.snapshot() == [], "refused calls must never reach Python"


def test_listed_tokens_give_their_client_key():
    with serving(keyed, bearer_tokens=TOKENS) as s, s.channel() as ch:
        alice = (("authorization", "Bearer s3cret-token"),)
        bob = (("authorization", "Bearer other-token"),)
        assert say(ch)(b"", metadata=alice, timeout=WAIT) == b"alice|alice"
        assert say(ch)(b"", metadata=bob, timeout=WAIT) == b"bob|bob"
        assert list(count(ch)(b"", metadata=alice, timeout=WAIT)) == [b"alice|alice"]
        with pytest.raises(grpc.RpcError) as info:
            say(ch)(b"", timeout=WAIT)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert [e[4] for e in s.log.calls()] == ["alice", "bob", "alice"]


def test_unknown_method_with_a_good_token_is_unimplemented():
    with serving(keyed, bearer_tokens=TOKENS) as s, s.channel() as ch:
        with pytest.raises(grpc.RpcError) as info:
            ch.unary_unary("/echo.Echo/Nope")(b"", metadata=(("authorization", "Bearer s3cret-token"),), timeout=WAIT)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_without_tokens_the_client_key_is_the_peer():
    with serving(keyed) as s, s.channel() as ch:
        answer = say(ch)(b"", metadata=(("authorization", "Bearer anything"),), timeout=WAIT).decode()
        key, details_key = answer.split("|")
        assert key == details_key
        assert key.startswith("ipv4:127.0.0.1:")
