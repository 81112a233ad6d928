"""The Prometheus endpoint (option grpc.pygrpc_native.metrics_address, or
NativeGrpcFront(metrics_address=...)): gRFC A66's server metrics and the
front's gauges, served by Go, parsed with prometheus_client's parser: counts
equal to the calls made, answers while every handler is busy and while a
handler holds the GIL. grpcio's OpenTelemetry plugin is compared with
grpc.server() in tests/test_observability.py.
"""

import asyncio
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent import futures
from typing import Dict, Tuple

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

import pygrpc_native
import pygrpc_native.aio
import pygrpc_native.health
from pygrpc_native import NativeGrpcFront
from pygrpc_native._metrics import ServerMetrics

pytestmark = pytest.mark.timeout(120)

HERE = pathlib.Path(__file__).resolve().parent
OPTION = "grpc.pygrpc_native.metrics_address"

Samples = Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int, timeout: float = 5.0) -> Samples:
    """The endpoint's samples, by (name, sorted labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def count(samples: Samples, method: str, status: str) -> float:
    key = ("grpc_server_call_duration_seconds_count", (("grpc_method", method), ("grpc_status", status)))
    return samples.get(key, 0)


def started(samples: Samples, method: str) -> float:
    return samples.get(("grpc_server_call_started_total", (("grpc_method", method),)), 0)


def _abort(request, context):
    context.abort(grpc.StatusCode.NOT_FOUND, "no")


async def _abort_aio(request, context):
    await context.abort(grpc.StatusCode.NOT_FOUND, "no")


def make_calls(port: int) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        for _ in range(3):
            assert channel.unary_unary("/m.Svc/Echo")(b"hello") == b"hello"
        with pytest.raises(grpc.RpcError):
            channel.unary_unary("/m.Svc/Abort")(b"")
        assert channel.unary_unary("/gen.Svc/Echo")(b"g") == b"g"
        with pytest.raises(grpc.RpcError):
            channel.unary_unary("/no.Such/Method")(b"")
        check = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert check.status == health_pb2.HealthCheckResponse.SERVING


def check_counts(samples: Samples) -> None:
    assert started(samples, "m.Svc/Echo") == 3
    assert count(samples, "m.Svc/Echo", "OK") == 3
    assert count(samples, "m.Svc/Abort", "NOT_FOUND") == 1
    # Generic and unknown methods are "other" (bounded cardinality).
    assert started(samples, "other") == 2
    assert count(samples, "other", "OK") == 1
    assert count(samples, "other", "UNIMPLEMENTED") == 1
    # Health is answered in Go, and measured like every call.
    assert count(samples, "grpc.health.v1.Health/Check", "OK") == 1
    labels = (("grpc_method", "m.Svc/Echo"), ("grpc_status", "OK"))
    assert samples[("grpc_server_call_rcvd_total_compressed_message_size_bytes_sum", labels)] == 15
    assert samples[("grpc_server_call_duration_seconds_bucket", labels + (("le", "+Inf"),))] == 3
    assert samples[("pygrpc_native_connections_active", ())] >= 0
    assert samples[("pygrpc_native_calls_active", ())] == 0


def wait_for_counts(port: int) -> Samples:
    # Calls are counted when they end on the wire, just after the client
    # has its answer.
    deadline = time.monotonic() + 5
    while count(samples := scrape(port), "grpc.health.v1.Health/Check", "OK") < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    return samples


def test_sync_server_endpoint() -> None:
    metrics_port = free_port()
    server = pygrpc_native.server(futures.ThreadPoolExecutor(4), options=[(OPTION, f"127.0.0.1:{metrics_port}")])
    server.add_registered_method_handlers(
        "m.Svc",
        {
            "Echo": grpc.unary_unary_rpc_method_handler(lambda request, context: request),
            "Abort": grpc.unary_unary_rpc_method_handler(_abort),
        },
    )
    generic = {"Echo": grpc.unary_unary_rpc_method_handler(lambda request, context: request)}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("gen.Svc", generic),))
    health_pb2_grpc.add_HealthServicer_to_server(pygrpc_native.health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        make_calls(port)
        check_counts(wait_for_counts(metrics_port))
    finally:
        server.stop(None)


def test_aio_server_endpoint() -> None:
    metrics_port = free_port()

    async def echo(request, context):
        return request

    async def main() -> None:
        server = pygrpc_native.aio.server(options=[(OPTION, f"127.0.0.1:{metrics_port}")])
        server.add_registered_method_handlers(
            "m.Svc",
            {
                "Echo": grpc.unary_unary_rpc_method_handler(echo),
                "Abort": grpc.unary_unary_rpc_method_handler(_abort_aio),
            },
        )
        generic = {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("gen.Svc", generic),))
        health_pb2_grpc.add_HealthServicer_to_server(pygrpc_native.health.aio.HealthServicer(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            await asyncio.get_running_loop().run_in_executor(None, make_calls, port)
            samples = await asyncio.get_running_loop().run_in_executor(None, wait_for_counts, metrics_port)
            check_counts(samples)
        finally:
            await server.stop(None)

    asyncio.run(main())


def test_answers_while_every_handler_is_busy() -> None:
    metrics_port = free_port()
    release = threading.Event()
    server = pygrpc_native.server(futures.ThreadPoolExecutor(1), options=[(OPTION, f"127.0.0.1:{metrics_port}")])
    server.add_registered_method_handlers(
        "m.Svc", {"Wait": grpc.unary_unary_rpc_method_handler(lambda request, context: release.wait(30) and b"")}
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            waiting = [channel.unary_unary("/m.Svc/Wait").future(b"", timeout=30) for _ in range(3)]
            deadline = time.monotonic() + 5
            # A call is counted as started at its HEADERS and as active a
            # moment later, once admitted: a scrape may fall in between.
            while (
                started(samples := scrape(metrics_port, timeout=1), "m.Svc/Wait") < 3
                or samples.get(("pygrpc_native_calls_active", ())) != 3
            ):
                assert time.monotonic() < deadline, samples
                time.sleep(0.02)
            release.set()
            for call in waiting:
                call.result(timeout=30)
    finally:
        release.set()
        server.stop(None)


@pytest.mark.parametrize("kind", ["native", "native-aio"])
def test_answers_while_a_handler_holds_the_gil(kind: str) -> None:
    metrics_port = free_port()
    # The server imports health_gil_server from this directory: named on
    # PYTHONPATH, as a Bazel sandbox's runfiles don't put it beside the
    # script's real path.
    here = [str(pathlib.Path(__file__).parent), str(HERE)]  # the runfiles' directory, and the real one
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [*here, os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "metrics_gil_server.py"), kind, str(metrics_port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )

    def line(prefix: str) -> str:
        text = proc.stdout.readline().strip()
        assert text.startswith(prefix), f"server said {text!r}, expected {prefix!r}..."
        return text[len(prefix) :]

    try:
        port = int(line("port "))
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            held = channel.unary_unary("/hold.Hold/Hold").future(b"", timeout=60)
            line("holding")
            time.sleep(0.2)  # the handler takes the GIL back from its print
            start = time.monotonic()
            samples = scrape(metrics_port, timeout=1.0)
            took = time.monotonic() - start
            assert held.result(timeout=60) == b"held"
            assert float(line("held ")) > 1.0, "the handler held the GIL too briefly to show anything"
        assert took < 1.0
        assert started(samples, "hold.Hold/Hold") == 1
        assert samples[("pygrpc_native_calls_active", ())] == 1
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_lowlevel_front_endpoint() -> None:
    front = NativeGrpcFront("127.0.0.1:0", [("/m.Svc/A", False)], metrics_address="127.0.0.1:0")
    assert front.metrics_port > 0
    front.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{front.port}") as channel:
            with pytest.raises(grpc.RpcError) as err:
                channel.unary_unary("/no.Such/Method")(b"")
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        deadline = time.monotonic() + 5
        while count(samples := scrape(front.metrics_port), "other", "UNIMPLEMENTED") < 1:
            assert time.monotonic() < deadline, samples
            time.sleep(0.02)
        # The methods given are named before any call to them.
        assert [name for name, _ in front._metrics_methods()] == ["other", "m.Svc/A"]
        front.name_in_metrics("/m.Svc/B")
        assert [name for name, _ in front._metrics_methods()] == ["other", "m.Svc/A", "m.Svc/B"]
    finally:
        front.stop(None)
    with pytest.raises(OSError):
        scrape(front.metrics_port, timeout=1)  # the endpoint stops with the front


def test_lowlevel_methods_from_a_generator_are_named() -> None:
    """methods= may be any iterable (docs/low-level-api.md): a generator's
    paths are named in the metrics too (its second reading found nothing:
    every call counted as "other")."""
    methods = ((path, False) for path in ("/m.Svc/A", "/m.Svc/B"))
    front = NativeGrpcFront("127.0.0.1:0", methods, metrics_address="127.0.0.1:0")
    try:
        assert [name for name, _ in front._metrics_methods()] == ["other", "m.Svc/A", "m.Svc/B"]
    finally:
        front.stop(None)


def test_nothing_is_measured_without_a_consumer() -> None:
    front = NativeGrpcFront("127.0.0.1:0", [])
    assert front._metrics_methods() == []
    with pytest.raises(RuntimeError, match="metrics are off"):
        front.name_in_metrics("/m.Svc/A")
    assert not ServerMetrics(front, [("grpc.max_receive_message_length", 10)]).enabled


def test_bad_metrics_addresses() -> None:
    with pytest.raises(TypeError, match=OPTION):
        pygrpc_native.server(futures.ThreadPoolExecutor(1), options=[(OPTION, 9090)])
    with pytest.raises(TypeError, match="metrics_address"):
        NativeGrpcFront("127.0.0.1:0", [], metrics_address="")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match="cannot listen"):
            NativeGrpcFront("127.0.0.1:0", [], metrics_address=f"127.0.0.1:{taken.getsockname()[1]}")
