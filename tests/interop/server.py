"""grpc.testing.TestService for the gRPC interop test cases, served by
pygrpc_native.server(), pygrpc_native.aio.server() or grpcio (controls).

    python tests/interop/server.py --impl native [--port 0] [--tls --cert C --key K]

Prints the port it listens on (a line with only the number) once it serves,
and stops on SIGTERM or SIGINT. It listens on 127.0.0.1 only.

The behaviours are those of the "Server" part of grpc's
doc/interop-test-descriptions.md:

* EmptyCall answers an Empty; UnaryCall a payload of response_size zero
  bytes (INVALID_ARGUMENT for a response_type other than COMPRESSABLE).
* StreamingOutputCall / FullDuplexCall send one response per
  ResponseParameters, after waiting interval_us before each; FullDuplexCall
  answers each request as it comes, HalfDuplexCall only after half-close.
* StreamingInputCall answers the total size of the request payloads.
* Echo Status: a request whose response_status has a code other than 0
  ends the call with that code and message; later requests aren't read.
* Echo Metadata: x-grpc-test-echo-initial is sent back in the initial
  metadata, x-grpc-test-echo-trailing-bin in the trailing metadata.
* CompressedRequest (expect_compressed): checked as far as the server can
  see how a request was encoded, see request_encoding().
* CompressedResponse (response_compressed / ResponseParameters.compressed):
  passed on as set_compression(Gzip) (for a stream, when any response is to
  be compressed) and disable_next_message_compression() before each response
  that is not.
* UnimplementedCall is left to the generated base class (UNIMPLEMENTED) and
  UnimplementedService isn't registered.

There are two servicers with the same behaviour: a synchronous one for
server() / grpc.server() and a coroutine one for the aio servers.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import pathlib
import signal
import socket
import sys
import threading
import time
from concurrent import futures
from typing import Any, Iterable, List, Optional, Sequence, Tuple

import grpc

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import protos  # noqa: E402

ECHO_INITIAL = "x-grpc-test-echo-initial"
ECHO_TRAILING = "x-grpc-test-echo-trailing-bin"
IMPLS = ("native", "native_aio", "grpcio", "grpcio_aio")

_CODES = {code.value[0]: code for code in grpc.StatusCode}


def request_encoding(context: Any) -> Optional[str]:
    """The grpc-encoding the client declared for the call's requests, when the
    server lets a handler see it; None when it can't be known.

    Neither grpcio nor grpc-go (pygrpc_native) hands grpc-encoding to the
    application as metadata, and the message-level compressed flag is
    consumed before the handler sees a message, so with the servers tested
    here this returns None and expect_compressed can't be enforced. The
    field is a nullable BoolValue for that reason ("servers not able to
    implement the full compression tests by introspecting the call").
    """
    for key, value in context.invocation_metadata() or ():
        if key == "grpc-encoding":
            return value if isinstance(value, str) else value.decode("ascii", "replace")
    return None


def _compression_error(expect: Any, context: Any) -> Optional[str]:
    """INVALID_ARGUMENT details if expect_compressed is violated, else None."""
    if not expect.value:
        return None
    encoding = request_encoding(context)
    if encoding is None:
        return None  # not observable: accepted (see request_encoding)
    if encoding == "identity":
        return "expected a compressed request, got grpc-encoding: identity"
    return None


def _status_of(echo: Any) -> Optional[Tuple[grpc.StatusCode, str]]:
    if echo.code == 0:
        return None
    return _CODES.get(echo.code, grpc.StatusCode.UNKNOWN), echo.message


def _echo_metadata(context: Any) -> Tuple[List[Tuple[str, Any]], List[Tuple[str, Any]]]:
    initial, trailing = [], []
    for key, value in context.invocation_metadata() or ():
        if key == ECHO_INITIAL:
            initial.append((key, value))
        elif key == ECHO_TRAILING:
            trailing.append((key, value))
    return initial, trailing


class _Common:
    def __init__(self, pb: Any, server_id: str) -> None:
        self.pb = pb
        self.m = pb.messages_pb2
        self.server_id = server_id
        self.hostname = socket.gethostname()

    def payload(self, response_type: int, size: int) -> Any:
        return self.m.Payload(type=response_type, body=bytes(size))

    def check_type(self, response_type: int) -> Optional[str]:
        if response_type != self.m.COMPRESSABLE:
            return f"unsupported response_type {response_type}"
        return None

    def simple_response(self, request: Any) -> Any:
        response = self.m.SimpleResponse(payload=self.payload(request.response_type, request.response_size))
        if request.fill_server_id:
            response.server_id = self.server_id
            response.hostname = self.hostname
        return response

    def stream_response(self, request: Any, size: int) -> Any:
        return self.m.StreamingOutputCallResponse(payload=self.payload(request.response_type, size))

    def unary_problem(self, request: Any, context: Any) -> Optional[Tuple[grpc.StatusCode, str]]:
        status = _status_of(request.response_status)
        if status is not None:
            return status
        error = _compression_error(request.expect_compressed, context) or self.check_type(request.response_type)
        if error is not None:
            return grpc.StatusCode.INVALID_ARGUMENT, error
        return None

    def stream_problem(self, request: Any) -> Optional[Tuple[grpc.StatusCode, str]]:
        status = _status_of(request.response_status)
        if status is not None:
            return status
        error = self.check_type(request.response_type)
        if error is not None:
            return grpc.StatusCode.INVALID_ARGUMENT, error
        return None


def make_servicer(pb: Any, server_id: str) -> Any:
    """The synchronous servicer (server() and grpc.server())."""
    base = pb.test_pb2_grpc.TestServiceServicer

    class TestService(_Common, base):
        def _echo(self, context: Any) -> None:
            initial, trailing = _echo_metadata(context)
            if initial:
                context.send_initial_metadata(initial)
            if trailing:
                context.set_trailing_metadata(trailing)

        def EmptyCall(self, request: Any, context: Any) -> Any:
            self._echo(context)
            return pb.empty_pb2.Empty()

        def UnaryCall(self, request: Any, context: Any) -> Any:
            self._echo(context)
            problem = self.unary_problem(request, context)
            if problem is not None:
                context.abort(*problem)
            if request.response_compressed.value:
                context.set_compression(grpc.Compression.Gzip)
            return self.simple_response(request)

        def _respond(self, request: Any, context: Any) -> Iterable[Any]:
            problem = self.stream_problem(request)
            if problem is not None:
                context.abort(*problem)
            if any(p.compressed.value for p in request.response_parameters):
                context.set_compression(grpc.Compression.Gzip)
            for params in request.response_parameters:
                if params.interval_us > 0:
                    time.sleep(params.interval_us / 1e6)
                if params.HasField("compressed") and not params.compressed.value:
                    context.disable_next_message_compression()
                yield self.stream_response(request, params.size)

        def StreamingOutputCall(self, request: Any, context: Any) -> Iterable[Any]:
            self._echo(context)
            yield from self._respond(request, context)

        def StreamingInputCall(self, request_iterator: Iterable[Any], context: Any) -> Any:
            self._echo(context)
            total = 0
            for request in request_iterator:
                error = _compression_error(request.expect_compressed, context)
                if error is not None:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, error)
                total += len(request.payload.body)
            return self.m.StreamingInputCallResponse(aggregated_payload_size=total)

        def FullDuplexCall(self, request_iterator: Iterable[Any], context: Any) -> Iterable[Any]:
            self._echo(context)
            for request in request_iterator:
                yield from self._respond(request, context)

        def HalfDuplexCall(self, request_iterator: Iterable[Any], context: Any) -> Iterable[Any]:
            self._echo(context)
            requests = list(request_iterator)
            for request in requests:
                yield from self._respond(request, context)

    return TestService(pb, server_id)


def make_aio_servicer(pb: Any, server_id: str) -> Any:
    """The coroutine servicer (pygrpc_native.aio.server(), grpc.aio.server())."""
    base = pb.test_pb2_grpc.TestServiceServicer

    class AioTestService(_Common, base):
        async def _echo(self, context: Any) -> None:
            initial, trailing = _echo_metadata(context)
            if initial:
                await context.send_initial_metadata(initial)
            if trailing:
                context.set_trailing_metadata(trailing)

        async def EmptyCall(self, request: Any, context: Any) -> Any:
            await self._echo(context)
            return pb.empty_pb2.Empty()

        async def UnaryCall(self, request: Any, context: Any) -> Any:
            if request.response_compressed.value:
                context.set_compression(grpc.Compression.Gzip)
            initial, _ = _echo_metadata(context)
            await self._echo(context)
            problem = self.unary_problem(request, context)
            if problem is not None:
                await context.abort(*problem)
            if request.response_compressed.value and not initial:
                # grpc.aio applies a call's compression when the initial
                # metadata is sent on its own, not with a unary answer.
                await context.send_initial_metadata(())
            return self.simple_response(request)

        async def _respond(self, request: Any, context: Any):  # async generator
            problem = self.stream_problem(request)
            if problem is not None:
                await context.abort(*problem)
            if any(p.compressed.value for p in request.response_parameters):
                context.set_compression(grpc.Compression.Gzip)
            for params in request.response_parameters:
                if params.interval_us > 0:
                    await asyncio.sleep(params.interval_us / 1e6)
                if params.HasField("compressed") and not params.compressed.value:
                    context.disable_next_message_compression()
                yield self.stream_response(request, params.size)

        async def StreamingOutputCall(self, request: Any, context: Any):
            await self._echo(context)
            async for response in self._respond(request, context):
                yield response

        async def StreamingInputCall(self, request_iterator: Any, context: Any) -> Any:
            await self._echo(context)
            total = 0
            async for request in request_iterator:
                error = _compression_error(request.expect_compressed, context)
                if error is not None:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, error)
                total += len(request.payload.body)
            return self.m.StreamingInputCallResponse(aggregated_payload_size=total)

        async def FullDuplexCall(self, request_iterator: Any, context: Any):
            await self._echo(context)
            async for request in request_iterator:
                async for response in self._respond(request, context):
                    yield response

        async def HalfDuplexCall(self, request_iterator: Any, context: Any):
            await self._echo(context)
            requests = [request async for request in request_iterator]
            for request in requests:
                async for response in self._respond(request, context):
                    yield response

    return AioTestService(pb, server_id)


def _credentials(impl: str, cert: bytes, key: bytes) -> grpc.ServerCredentials:
    if impl.startswith("native"):
        import pygrpc_native

        return pygrpc_native.ssl_server_credentials([(key, cert)])
    return grpc.ssl_server_credentials([(key, cert)])


def _bind(server: Any, args: argparse.Namespace) -> int:
    address = f"127.0.0.1:{args.port}"
    if args.tls:
        creds = _credentials(args.impl, pathlib.Path(args.cert).read_bytes(), pathlib.Path(args.key).read_bytes())
        port = server.add_secure_port(address, creds)
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        raise SystemExit(f"could not listen on {address}")
    return port


def _announce(port: int) -> None:
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()


def serve_sync(pb: Any, args: argparse.Namespace) -> None:
    pool = futures.ThreadPoolExecutor(max_workers=args.workers, thread_name_prefix="interop")
    if args.impl == "native":
        import pygrpc_native

        server = pygrpc_native.server(pool)
    else:
        server = grpc.server(pool)
    pb.test_pb2_grpc.add_TestServiceServicer_to_server(make_servicer(pb, args.impl), server)
    port = _bind(server, args)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    _announce(port)
    while not stop.wait(0.2):
        pass
    server.stop(args.grace).wait(args.grace + 5)
    pool.shutdown(wait=False, cancel_futures=True)


async def serve_aio(pb: Any, args: argparse.Namespace) -> None:
    if args.impl == "native_aio":
        import pygrpc_native.aio

        server = pygrpc_native.aio.server()
    else:
        import grpc.aio

        server = grpc.aio.server()
    pb.test_pb2_grpc.add_TestServiceServicer_to_server(make_aio_servicer(pb, args.impl), server)
    port = _bind(server, args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    _announce(port)
    await stop.wait()
    await asyncio.wait_for(server.stop(args.grace), args.grace + 5)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", choices=IMPLS, default="native")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--tls", action="store_true", help="serve TLS with --cert / --key")
    parser.add_argument("--cert", help="PEM certificate chain")
    parser.add_argument("--key", help="PEM private key")
    parser.add_argument("--gen", help="directory for the generated code (reused if it's there)")
    parser.add_argument("--workers", type=int, default=16, help="thread pool size of the sync servers")
    parser.add_argument("--grace", type=float, default=1.0, help="seconds of grace when stopping")
    args = parser.parse_args(argv)
    if args.tls and not (args.cert and args.key):
        parser.error("--tls needs --cert and --key")
    # Handler errors go to stderr for every server alike (grpcio's logger has
    # a NullHandler, so unconfigured it would say nothing).
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    pb = protos.load(pathlib.Path(args.gen) if args.gen else None)
    if args.impl.endswith("_aio"):
        asyncio.run(serve_aio(pb, args))
    else:
        serve_sync(pb, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
