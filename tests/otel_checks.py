"""grpcio's OpenTelemetry plugin and OpenTelemetry's gRPC tracing on our
servers, compared with grpcio's own.

Runs in the OpenTelemetry test environment (build/venv-otel: grpcio 1.85.0,
which grpcio-observability pins, and tests/otel-requirements.txt), started by
tests/test_observability.py; not collected by the main suite (its name
doesn't start with test_).

Metrics: the same plugin with an InMemoryMetricReader, the same calls on
grpc.server() and on ours (OK, aborted, a 50 ms handler, server-streaming,
client-streaming, bidi, a generic method, an unknown one): the same server
metric names, attributes and data-point counts. Tracing:
opentelemetry-instrumentation-grpc's server interceptor on our servers.
"""

import asyncio
import time
from concurrent import futures
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple

import grpc
import grpc.aio
import grpc_observability
from grpc_observability._open_telemetry_plugin import OpenTelemetryLabelInjector, OpenTelemetryPluginOption
import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.grpc import aio_server_interceptor, server_interceptor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pygrpc_native
import pygrpc_native.aio

pytestmark = pytest.mark.timeout(120)

# gRFC A66's latency buckets (seconds), given to the reader as a View: the
# plugin's histograms leave them to the SDK.
LATENCY_BOUNDS = (0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006,
                  0.008, 0.01, 0.013, 0.016, 0.02, 0.025, 0.03, 0.04, 0.05, 0.065, 0.08, 0.1, 0.13, 0.16, 0.2, 0.25,
                  0.3, 0.4, 0.5, 0.65, 0.8, 1, 2, 5, 10, 20, 50, 100)  # fmt: skip
SLOW_S = 0.05

# -- the service ------------------------------------------------------------------


def _abort(request: bytes, context: grpc.ServicerContext) -> bytes:
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no")


def _slow(request: bytes, context: grpc.ServicerContext) -> bytes:
    time.sleep(SLOW_S)
    return request


def _count(requests: Any, context: grpc.ServicerContext) -> bytes:
    return b"x" * sum(1 for _ in requests)


REGISTERED = {
    "Echo": grpc.unary_unary_rpc_method_handler(lambda request, context: request),
    "Abort": grpc.unary_unary_rpc_method_handler(_abort),
    "Slow": grpc.unary_unary_rpc_method_handler(_slow),
    "Stream": grpc.unary_stream_rpc_method_handler(lambda request, context: iter([request] * 3)),
    "Count": grpc.stream_unary_rpc_method_handler(_count),
    "Bidi": grpc.stream_stream_rpc_method_handler(lambda requests, context: (r for r in requests)),
}
GENERIC = grpc.method_handlers_generic_handler(
    "gen.Svc", {"Echo": grpc.unary_unary_rpc_method_handler(lambda request, context: request)}
)


def make_calls(port: int) -> int:
    """Makes the calls; returns how many."""
    calls = 0
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        for _ in range(3):
            assert channel.unary_unary("/diff.Svc/Echo")(b"hello") == b"hello"
            calls += 1
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary("/diff.Svc/Abort")(b"")
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert channel.unary_unary("/diff.Svc/Slow")(b"s") == b"s"
        assert list(channel.unary_stream("/diff.Svc/Stream")(b"abc")) == [b"abc"] * 3
        assert channel.stream_unary("/diff.Svc/Count")(iter([b"1", b"2"])) == b"xx"
        assert list(channel.stream_stream("/diff.Svc/Bidi")(iter([b"a" * 2000, b"b"]))) == [b"a" * 2000, b"b"]
        assert channel.unary_unary("/gen.Svc/Echo")(b"g") == b"g"
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary("/no.Such/Method")(b"x" * 50)  # never read: 0 bytes received
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        calls += 7
    return calls


# -- what the reader holds ---------------------------------------------------------

Points = Dict[str, Dict[FrozenSet[Tuple[str, Any]], Any]]

# gRFC A66's server metrics: the plugin records these four on each server.
SERVER_METRICS = (
    "grpc.server.call.started",
    "grpc.server.call.duration",
    "grpc.server.call.sent_total_compressed_message_size",
    "grpc.server.call.rcvd_total_compressed_message_size",
)


def server_points(reader: InMemoryMetricReader) -> Points:
    """Server metric name -> attributes -> (counter value, or histogram
    (count, bucket counts, repr of the sum: 7.0 and 7 differ to an
    exporter))."""
    out: Points = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if not metric.name.startswith("grpc.server."):
                    continue
                for point in metric.data.data_points:
                    key = frozenset(point.attributes.items())
                    value = (
                        point.value
                        if hasattr(point, "value")
                        else (point.count, tuple(point.bucket_counts), repr(point.sum))
                    )
                    out.setdefault(metric.name, {})[key] = value
    return out


def totals(points: Points) -> Dict[str, int]:
    """Each server metric's total: the started count, the histograms' data
    point counts. Every one is the number of calls once all are recorded."""
    return {
        name: sum(v if isinstance(v, int) else v[0] for v in by.values())
        for name, by in points.items()
    }


def new_plugin(method_filter: Any = None, **settings: Any) -> Tuple[Any, InMemoryMetricReader]:
    """A plugin (not registered) whose meter provider has a reader, with
    A66's latency buckets; settings: the plugin's other arguments."""
    reader = InMemoryMetricReader()
    view = View(
        instrument_name="grpc.server.call.duration",
        aggregation=ExplicitBucketHistogramAggregation(boundaries=LATENCY_BOUNDS),
    )
    provider = MeterProvider(metric_readers=[reader], views=[view])
    plugin = grpc_observability.OpenTelemetryPlugin(
        meter_provider=provider, generic_method_attribute_filter=method_filter, **settings
    )
    return plugin, reader


def collect(
    serve: Callable[[], Tuple[Any, int]],
    stop: Callable[[Any], None],
    calls: Callable[[int], int],
    method_filter: Any = None,
    pause: Callable[[float], None] = time.sleep,
    **settings: Any,
) -> Points:
    """The server metrics a plugin (made with settings) records for the
    calls made to the server serve() starts (returning it and its port).
    pause(seconds) waits while the server goes on (an aio server's loop must
    run meanwhile)."""
    plugin, reader = new_plugin(method_filter, **settings)
    with plugin:
        server, port = serve()
        made = calls(port)
        # A server's metrics reach the reader after its calls end (ours in
        # our bridge's batches; grpc.server()'s through grpc_observability's
        # export thread, every half second): wait for all four to count
        # every call, not only the durations.
        want = dict.fromkeys(SERVER_METRICS, made)
        deadline = time.monotonic() + 30
        while totals(points := server_points(reader)) != want and time.monotonic() < deadline:
            pause(0.05)
        stop(server)
    assert totals(points) == want, points
    return points


def sync_server(factory: Callable[..., Any]) -> Tuple[Any, int]:
    server = factory(futures.ThreadPoolExecutor(8))
    server.add_registered_method_handlers("diff.Svc", REGISTERED)
    server.add_generic_rpc_handlers((GENERIC,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def comparable(points: Points) -> Dict[str, Dict[Any, Any]]:
    """The points less the durations' buckets and sums (times differ run
    to run; sizes don't)."""
    return {
        name: {k: (v[0] if name == "grpc.server.call.duration" else v) for k, v in by.items()}
        for name, by in points.items()
    }


def assert_same(ours: Points, reference: Points) -> None:
    """Our server's points are grpcio's server's, durations' buckets aside;
    on a difference, names each differing point with both values."""
    a, b = comparable(ours), comparable(reference)
    diffs = [
        f"{name} {sorted(key)}: ours {a.get(name, {}).get(key)}, grpcio {b.get(name, {}).get(key)}"
        for name in sorted(set(a) | set(b))
        for key in set(a.get(name, {})) | set(b.get(name, {}))
        if a.get(name, {}).get(key) != b.get(name, {}).get(key)
    ]
    assert not diffs, "\n".join(diffs)


def slow_bucket(points: Points) -> Tuple[float, float]:
    """The duration bucket of the 50 ms call: (lower, upper) bound."""
    key = frozenset({("grpc.method", "diff.Svc/Slow"), ("grpc.status", "OK")})
    _, buckets, _ = points["grpc.server.call.duration"][key]
    i = [n for n, c in enumerate(buckets) if c][0]
    return LATENCY_BOUNDS[i - 1], LATENCY_BOUNDS[i] if i < len(LATENCY_BOUNDS) else float("inf")


def test_plugin_metrics_match_grpc_server() -> None:
    ours = collect(lambda: sync_server(pygrpc_native.server), lambda s: s.stop(None), make_calls)
    reference = collect(lambda: sync_server(grpc.server), lambda s: s.stop(None), make_calls)
    assert_same(ours, reference)
    assert set(ours) == set(SERVER_METRICS)
    for points in (ours, reference):
        low, high = slow_bucket(points)
        assert low >= SLOW_S and high <= 0.5, (low, high)


def test_plugin_method_filter_matches_grpc_server() -> None:
    def named(method: str) -> bool:
        return method.startswith("gen.")

    ours = collect(lambda: sync_server(pygrpc_native.server), lambda s: s.stop(None), make_calls, named)
    reference = collect(lambda: sync_server(grpc.server), lambda s: s.stop(None), make_calls, named)
    assert_same(ours, reference)
    methods = {dict(k)["grpc.method"] for k in ours["grpc.server.call.started"]}
    assert {"gen.Svc/Echo", "other"} <= methods  # the generic method named, the unknown one not


class _RegionLabels(OpenTelemetryLabelInjector):
    def get_labels_for_exchange(self) -> Dict[str, Any]:
        return {}

    def get_additional_labels(self, include_exchange_labels: bool) -> Dict[str, str]:
        return {"app.region": "eu", "exchange": str(include_exchange_labels), b"as.bytes": b"v"}


class _ServerOption(OpenTelemetryPluginOption):
    """A plugin option active on servers (not xDS ones: as ours and
    grpc.server() by default are)."""

    def is_active_on_server(self, xds: bool) -> bool:
        return not xds

    def is_active_on_client_channel(self, target: str) -> bool:
        return False

    def get_label_injector(self) -> OpenTelemetryLabelInjector:
        return _RegionLabels()


class _ClientOption(_ServerOption):
    def is_active_on_server(self, xds: bool) -> bool:
        return False

    def get_label_injector(self) -> OpenTelemetryLabelInjector:
        raise AssertionError("a client option's injector is not a server's")


def test_plugin_options_and_target_filter_as_grpc_server() -> None:
    """The label injectors of options active on a server add their labels
    (the started count's without exchange labels); a target filter that
    says no adds grpc.target "other", as on grpc.server()."""
    settings = {"plugin_options": [_ServerOption(), _ClientOption()], "target_attribute_filter": lambda target: False}
    ours = collect(lambda: sync_server(pygrpc_native.server), lambda s: s.stop(None), make_calls, **settings)
    reference = collect(lambda: sync_server(grpc.server), lambda s: s.stop(None), make_calls, **settings)
    assert_same(ours, reference)
    for name, by in ours.items():
        for key in by:
            labels = dict(key)
            assert labels["app.region"] == "eu" and labels["grpc.target"] == "other", (name, labels)
            assert labels["exchange"] == str(name != "grpc.server.call.started"), (name, labels)


def test_plugin_deregistered_records_nothing_until_registered_again() -> None:
    """grpc.server() records into the plugin registered when it was created
    while that plugin is registered: nothing while it is deregistered, and
    again once the same plugin is registered again."""

    def run(factory: Callable[..., Any]) -> List[Dict[str, int]]:
        plugin, reader = new_plugin()
        seen = []

        def calls(n: int, expected: Optional[int]) -> None:
            """n calls, then what the reader holds once it counts expected
            calls (None: nothing more is expected, 2 s later, the time
            either server's records would take to come)."""
            for _ in range(n):
                assert channel.unary_unary("/diff.Svc/Echo")(b"hi") == b"hi"
            deadline = time.monotonic() + (2 if expected is None else 30)
            while totals(server_points(reader)) != dict.fromkeys(SERVER_METRICS, expected) and time.monotonic() < deadline:
                time.sleep(0.05)
            seen.append(totals(server_points(reader)))

        plugin.register_global()
        server, port = sync_server(factory)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                calls(2, 2)
                plugin.deregister_global()
                calls(3, None)
                plugin.register_global()
                calls(4, 6)
        finally:
            plugin.deregister_global()
            server.stop(None)
        return seen

    expected = [dict.fromkeys(SERVER_METRICS, n) for n in (2, 2, 6)]
    assert run(grpc.server) == expected
    assert run(pygrpc_native.server) == expected


def test_plugin_metrics_match_grpc_aio_server() -> None:
    async def echo(request: bytes, context: Any) -> bytes:
        return request

    async def abort(request: bytes, context: Any) -> bytes:
        await context.abort(grpc.StatusCode.NOT_FOUND, "no")

    handlers = {
        "Echo": grpc.unary_unary_rpc_method_handler(echo),
        "Abort": grpc.unary_unary_rpc_method_handler(abort),
    }

    def run(factory: Callable[..., Any]) -> Points:
        loop = asyncio.new_event_loop()

        async def start() -> Tuple[Any, int]:
            server = factory()
            server.add_registered_method_handlers("diff.Svc", handlers)
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            return server, port

        def serve() -> Tuple[Any, int]:
            return loop.run_until_complete(start())

        async def calls(port: int) -> int:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                for _ in range(2):
                    assert await channel.unary_unary("/diff.Svc/Echo")(b"hi") == b"hi"
                with pytest.raises(grpc.aio.AioRpcError):
                    await channel.unary_unary("/diff.Svc/Abort")(b"")
            return 3

        def stop(server: Any) -> None:
            loop.run_until_complete(server.stop(None))

        try:
            return collect(
                serve,
                stop,
                lambda port: loop.run_until_complete(calls(port)),
                pause=lambda seconds: loop.run_until_complete(asyncio.sleep(seconds)),
            )
        finally:
            loop.close()

    assert_same(run(pygrpc_native.aio.server), run(grpc.aio.server))


# -- tracing -----------------------------------------------------------------------

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_SPAN = "b7ad6b7169203331"


@pytest.fixture(scope="module")
def spans() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


def traced_calls(port: int) -> None:
    metadata = (("traceparent", f"00-{TRACE_ID}-{PARENT_SPAN}-01"),)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        assert channel.unary_unary("/diff.Svc/Echo")(b"x", metadata=metadata) == b"x"
        with pytest.raises(grpc.RpcError):
            channel.unary_unary("/diff.Svc/Abort")(b"", metadata=metadata)


def span_outcomes(exporter: InMemorySpanExporter) -> Dict[str, Tuple[Any, Any]]:
    """method -> (span status, rpc.grpc.status_code), after checking that
    every span is a server span that continues the incoming traceparent."""
    out = {}
    for span in exporter.get_finished_spans():
        assert span.kind == trace.SpanKind.SERVER
        assert format(span.context.trace_id, "032x") == TRACE_ID
        assert format(span.parent.span_id, "016x") == PARENT_SPAN
        out[span.name] = (span.status.status_code, span.attributes.get("rpc.grpc.status_code"))
    assert set(out) == {"/diff.Svc/Echo", "/diff.Svc/Abort"}, out
    return out


def test_tracing_interceptor(spans: InMemorySpanExporter) -> None:
    def run(factory: Callable[..., Any]) -> Dict[str, Tuple[Any, Any]]:
        spans.clear()
        server = factory(futures.ThreadPoolExecutor(2), interceptors=[server_interceptor()])
        server.add_registered_method_handlers("diff.Svc", REGISTERED)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        try:
            traced_calls(port)
        finally:
            server.stop(None)
        return span_outcomes(spans)

    assert run(pygrpc_native.server) == run(grpc.server)


def test_aio_tracing_interceptor(spans: InMemorySpanExporter) -> None:
    async def echo(request: bytes, context: Any) -> bytes:
        return request

    async def abort(request: bytes, context: Any) -> bytes:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no")

    async def main(factory: Callable[..., Any]) -> None:
        server = factory(interceptors=[aio_server_interceptor()])
        server.add_registered_method_handlers(
            "diff.Svc",
            {"Echo": grpc.unary_unary_rpc_method_handler(echo), "Abort": grpc.unary_unary_rpc_method_handler(abort)},
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            await asyncio.get_running_loop().run_in_executor(None, traced_calls, port)
        finally:
            await server.stop(None)

    def run(factory: Callable[..., Any]) -> Dict[str, Tuple[Any, Any]]:
        spans.clear()
        asyncio.run(main(factory))
        return span_outcomes(spans)

    assert run(pygrpc_native.aio.server) == run(grpc.aio.server)


# -- recording a batch at once -----------------------------------------------------


@pytest.mark.parametrize("temporality", ["cumulative", "delta"])
def test_bulk_histogram_records_as_record_does(temporality: str) -> None:
    from opentelemetry.sdk.metrics import Histogram
    from opentelemetry.sdk.metrics.export import AggregationTemporality

    from pygrpc_native._otel_bulk import BulkHistogram

    def points(record_batch: Callable[[Any, list, dict], None]) -> list:
        kind = AggregationTemporality.DELTA if temporality == "delta" else AggregationTemporality.CUMULATIVE
        reader = InMemoryMetricReader(preferred_temporality={Histogram: kind})
        views = [View(instrument_name="h2", attribute_keys={"grpc.method"})]
        provider = MeterProvider(metric_readers=[reader], views=views)
        meter = provider.get_meter("t")
        out = []
        for name in ("h1", "h2"):
            histogram = meter.create_histogram(name, unit="s")
            for batch in ([0.001, 0.2, 7.0, 0.0], [3.5, 0.05]):
                record_batch(histogram, batch, {"grpc.method": "a/b", "grpc.status": "OK"})
                data = reader.get_metrics_data()
                out.append([
                    (m.name, dict(p.attributes), p.count, p.sum, p.min, p.max, tuple(p.bucket_counts))
                    for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
                    for p in m.data.data_points
                ])  # fmt: skip
        return out

    bulks = []

    def bulk(histogram: Any, values: list, attrs: dict) -> None:
        b = BulkHistogram(histogram)
        b.record_many(values, attrs)
        bulks.append(b)

    def one_by_one(histogram: Any, values: list, attrs: dict) -> None:
        for v in values:
            histogram.record(v, attrs)

    assert points(bulk) == points(one_by_one)
    assert all(b._direct for b in bulks), "the SDK's layout changed: batches go value by value"


@pytest.mark.parametrize("setup", ["second reader exponential", "always_on exemplars"])
def test_bulk_histogram_where_record_must_be_used(setup: str) -> None:
    """A second reader with another aggregation (as an OTLP exporter's
    base2 exponential preference makes): the first batch counted once in
    each, not twice in the first (ours added it, then fell back to
    record() for all). An exemplar filter that samples every value: an
    exemplar per value, as record() makes them (ours made none)."""
    from opentelemetry.sdk.metrics import Histogram
    from opentelemetry.sdk.metrics._internal.exemplar import AlwaysOnExemplarFilter
    from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation

    from pygrpc_native._otel_bulk import BulkHistogram

    def points(record_batch: Callable[[Any, list, dict], None]) -> list:
        readers = [InMemoryMetricReader()]
        kwargs: Dict[str, Any] = {}
        if setup == "second reader exponential":
            readers.append(InMemoryMetricReader(preferred_aggregation={Histogram: ExponentialBucketHistogramAggregation()}))
        else:
            kwargs["exemplar_filter"] = AlwaysOnExemplarFilter()
        provider = MeterProvider(metric_readers=readers, **kwargs)
        histogram = provider.get_meter("t").create_histogram("h", unit="s")
        for batch in ([0.001, 0.2, 7.0], [3.5]):
            record_batch(histogram, batch, {"grpc.method": "a/b"})
        out = []
        for reader in readers:
            for rm in reader.get_metrics_data().resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        for p in m.data.data_points:
                            out.append((p.count, p.sum, sorted(e.value for e in p.exemplars)))
        return out

    def bulk(histogram: Any, values: list, attrs: dict) -> None:
        BulkHistogram(histogram).record_many(values, attrs)

    def one_by_one(histogram: Any, values: list, attrs: dict) -> None:
        for v in values:
            histogram.record(v, attrs)

    ours, reference = points(bulk), points(one_by_one)
    assert ours == reference
    assert reference[0][:2] == (4, 10.701)
