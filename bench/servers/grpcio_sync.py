"""A grpc.Server with a thread pool and a generic handler for the four echo
methods (unary, server, client and bidi streaming; the request streams read
by iterating the request iterator): grpcio's grpc.server() (the reference) or
pygrpc_native.server() (--impl native), with the same handlers and arguments.

No serializers are registered, so the handlers get and return raw bytes, the
same work the low-level server does. --tls-cert/--tls-key serve TLS with
grpc.ssl_server_credentials() or pygrpc_native.ssl_server_credentials().
--metrics turns gRFC A66's metrics on: "prometheus" (pygrpc_native's
endpoint, measured in Go, on a free port nobody scrapes) or "otel" (grpcio's
OpenTelemetry plugin registered globally, into an SDK meter provider with an
in-memory reader; needs grpcio-observability: build/venv-otel).
"""

from concurrent import futures

import grpc

from bench.servers import _common


def _echo(request: bytes, context) -> bytes:
    return request


def _count(request: bytes, context):
    n, body = _common.parse_count(request)
    for _ in range(n):
        yield body


def _collect(requests, context) -> bytes:
    last = b""
    for message in requests:
        last = message
    return last


def _chat(requests, context):
    for message in requests:
        yield message


def _register_otel_plugin():
    """Registers the plugin globally; returns it (deregistered at the end,
    or its exporting thread keeps the process alive)."""
    import grpc_observability
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    plugin = grpc_observability.OpenTelemetryPlugin(meter_provider=provider)
    plugin.register_global()
    return plugin


def main() -> None:
    p = _common.parser(__doc__)
    p.add_argument("--workers", type=int, default=4, help="ThreadPoolExecutor max_workers")
    p.add_argument("--impl", choices=("grpcio", "native"), default="grpcio", help="whose server() to run")
    p.add_argument("--metrics", choices=("off", "prometheus", "otel"), default="off", help="A66 metrics consumer")
    args = p.parse_args()
    _common.check_loopback(args.host)
    stop = _common.install_stop_signals()

    handler = grpc.method_handlers_generic_handler(
        _common.SERVICE,
        {
            _common.ECHO_METHOD.rsplit("/", 1)[1]: grpc.unary_unary_rpc_method_handler(_echo),
            _common.COUNT_METHOD.rsplit("/", 1)[1]: grpc.unary_stream_rpc_method_handler(_count),
            _common.COLLECT_METHOD.rsplit("/", 1)[1]: grpc.stream_unary_rpc_method_handler(_collect),
            _common.CHAT_METHOD.rsplit("/", 1)[1]: grpc.stream_stream_rpc_method_handler(_chat),
        },
    )
    if args.impl == "native":
        import pygrpc_native

        make_server, make_credentials = pygrpc_native.server, pygrpc_native.ssl_server_credentials
    else:
        make_server, make_credentials = grpc.server, grpc.ssl_server_credentials
    options, plugin = [], None
    if args.metrics == "prometheus":
        options.append(("grpc.pygrpc_native.metrics_address", "127.0.0.1:0"))
    elif args.metrics == "otel":
        plugin = _register_otel_plugin()
    server = make_server(futures.ThreadPoolExecutor(max_workers=args.workers), options=options)
    server.add_generic_rpc_handlers((handler,))
    port = _common.add_port(server, args, make_credentials)
    server.start()
    _common.announce(port)
    _common.wait(stop)
    server.stop(args.grace).wait()
    if plugin is not None:
        plugin.deregister_global()


if __name__ == "__main__":
    main()
