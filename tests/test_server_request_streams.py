"""Request streams on pygrpc_native.server() (README: "What runs
natively"): client-streaming, bidi, reflection and unknown methods, all
served through the Go front with nothing behind it. Differential where
grpcio's behaviour is the reference: the same scenario runs against
grpc.server() too. The full tables are test_diff_streams*.py."""

import queue
import time

import grpc
import pytest
from diff.harness import SERVICE, method, running, same
from grpc_reflection.v1alpha import reflection
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

pytestmark = pytest.mark.timeout(60)

MIB = 1 << 20


def _bidi_echo(requests, context):
    for message in requests:
        yield message


def _collect(requests, context):
    return b"+".join(requests)


def _setup(server, state):
    def watched_bidi(requests, context):
        state.record("bidi_started", True)
        for message in requests:
            yield message
        state.record("done", True)

    def slow_bidi(requests, context):
        try:
            yield next(requests)
            deadline = time.monotonic() + 10
            while context.is_active() and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            state.record("is_active_after_cancel", context.is_active())

    handlers = {
        "Bidi": grpc.stream_stream_rpc_method_handler(_bidi_echo),
        "Collect": grpc.stream_unary_rpc_method_handler(_collect),
        "Watched": grpc.stream_stream_rpc_method_handler(watched_bidi),
        "Slow": grpc.stream_stream_rpc_method_handler(slow_bidi),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))


def test_bidi_ping_pong_of_1000_messages():
    """Each message is sent only after the previous answer arrived."""

    def scenario(run):
        outbox: "queue.Queue[bytes | None]" = queue.Queue()
        call = run.channel.stream_stream(method("Bidi"))(iter(outbox.get, None), timeout=30)
        answers = []
        for i in range(1000):
            outbox.put(b"%d" % i)
            answers.append(next(call))
        outbox.put(None)
        return answers == [b"%d" % i for i in range(1000)], list(call), call.code()

    assert same(_setup, scenario) == (True, [], grpc.StatusCode.OK)


def test_client_streaming_and_large_streamed_messages():
    big = [bytes([i]) * (3 * MIB) for i in range(3)]

    def scenario(run):
        collected = run.channel.stream_unary(method("Collect"))(iter([b"a", b"b", b"c"]), timeout=10)
        echoed = list(run.channel.stream_stream(method("Bidi"))(iter(big), timeout=30))
        return collected, [len(m) for m in echoed], [m[:1] for m in echoed]

    assert same(_setup, scenario) == (b"a+b+c", [3 * MIB] * 3, [b"\x00", b"\x01", b"\x02"])


def test_client_cancel_mid_stream_reaches_the_backend_handler():
    def scenario(run):
        outbox: "queue.Queue[bytes | None]" = queue.Queue()
        outbox.put(b"one")
        call = run.channel.stream_stream(method("Slow"))(iter(outbox.get, None), timeout=30)
        assert next(call) == b"one"
        call.cancel()
        outbox.put(None)
        return run.state.wait_for("is_active_after_cancel", 10)

    assert same(_setup, scenario) is False


def test_deadline_mid_stream():
    def never_ending():
        yield b"first"
        time.sleep(5)

    def scenario(run):
        got = []
        try:
            for reply in run.channel.stream_stream(method("Bidi"))(never_ending(), timeout=0.5):
                got.append(reply)
        except grpc.RpcError as err:
            return got, err.code()
        return got, None

    assert same(_setup, scenario) == ([b"first"], grpc.StatusCode.DEADLINE_EXCEEDED)


def test_unknown_stream_method_is_unimplemented():
    def scenario(run):
        with pytest.raises(grpc.RpcError) as info:
            run.channel.stream_stream("/no.Such/Thing")(iter([b""]), timeout=5).__next__()
        return info.value.code(), info.value.details()

    assert same(_setup, scenario) == (grpc.StatusCode.UNIMPLEMENTED, "Method not found!")


@pytest.mark.parametrize("limit_option", ["grpc.max_receive_message_length", "grpc.max_send_message_length"])
def test_message_limits_apply_to_request_streams(limit_option):
    def scenario(run):
        with pytest.raises(grpc.RpcError) as info:
            list(run.channel.stream_stream(method("Bidi"))(iter([b"x" * 2048]), timeout=5))
        return info.value.code()

    assert same(_setup, scenario, options=[(limit_option, 1024)]) == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_reflection_lists_services_through_the_front():
    """grpcio-reflection's own client, talking to the front: reflection is a
    bidi method, served natively."""

    def setup(server, state):
        _setup(server, state)
        reflection.enable_server_reflection((SERVICE, reflection.SERVICE_NAME), server)

    def scenario(run):
        database = ProtoReflectionDescriptorDatabase(run.channel)
        return sorted(database.get_services())

    assert same(setup, scenario) == sorted([SERVICE, reflection.SERVICE_NAME])


def test_request_streams_are_served_natively():
    """No call is relayed: the front counts a bidi call as its own."""
    with running("native", _setup) as run:
        list(run.channel.stream_stream(method("Bidi"))(iter([b"x"]), timeout=5))
        metrics = run.server._server.front.metrics()
        assert metrics["calls_proxied"] == 0
        assert metrics["calls_completed"] == 1
