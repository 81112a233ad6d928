"""Our own client for the interop cases client_compressed_* and
server_compressed_*, which grpc-go's interop client doesn't implement. It
is a grpcio client that sends gzip-compressed requests and asks for
compressed responses.

    python tests/interop/compressed_client.py --server_port P --test_case client_compressed_unary \
        [--use_tls --ca_file CA --server_host_override localhost] [--wire_check]

It takes the flags of the interop clients it stands in for, prints what it
did, and exits 0 when the case passes, 1 when it fails.

What it checks (grpc's doc/interop-test-descriptions.md, as far as a grpcio
client and these servers allow):

client_compressed_unary
  1. probe: an uncompressed UnaryCall with expect_compressed=true. A server
     that can see how a request was encoded answers INVALID_ARGUMENT; one
     that can't (grpcio, and pygrpc_native, which hands handlers the same
     metadata) answers it normally. Either is accepted and reported; the
     field is nullable for servers of the second kind.
  2. a gzip-compressed UnaryCall with expect_compressed=true: OK, 314159
     bytes of payload back.
  3. an uncompressed UnaryCall with expect_compressed=false: OK, 314159
     bytes back.

client_compressed_streaming
  1. probe: an uncompressed StreamingInputCall of one message with
     expect_compressed=true (INVALID_ARGUMENT or OK, as above).
  2. a gzip-compressed StreamingInputCall of two messages, 27182 bytes with
     expect_compressed=true and 45904 bytes with expect_compressed=false:
     OK, aggregated_payload_size 73086. The description sends the second
     message uncompressed; grpcio's client has no per-message switch for
     request compression, so here both are compressed.

server_compressed_unary
  1. UnaryCall with response_compressed=true: OK, 314159 bytes back,
     compressed on the wire.
  2. the same with response_compressed=false: uncompressed on the wire.

server_compressed_streaming
  StreamingOutputCall with two ResponseParameters, 31415 bytes compressed
  and 92653 bytes uncompressed: OK, both sizes, the first message
  compressed on the wire and the second not.

--wire_check (plaintext only) puts a relay in front of the server that reads
the HTTP/2 DATA frames both ways and records each gRPC message's compressed
flag (tests/diff/wiretap.py), and checks that the messages meant to be
compressed were compressed on the wire and the others weren't. Otherwise a
server that ignored compression would pass unnoticed. grpcio's client
doesn't tell compressed responses apart, so with TLS only the sizes are
checked.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any, List, Optional, Sequence, Tuple

import grpc

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.append(str(pathlib.Path(__file__).resolve().parent.parent / "diff"))  # after ours: it has a protos.py too
import protos  # noqa: E402
from wiretap import WireTap  # noqa: E402

CASES = ("client_compressed_unary", "client_compressed_streaming", "server_compressed_unary", "server_compressed_streaming")
RPC_TIMEOUT = 20.0
LARGE_REQ, LARGE_RESP = 271828, 314159
STREAM_SIZES = (27182, 45904)
RESPONSE_SIZES = (31415, 92653)


class Failure(Exception):
    pass


def _probe_outcome(call: Any) -> str:
    try:
        call()
    except grpc.RpcError as err:
        if err.code() == grpc.StatusCode.INVALID_ARGUMENT:
            return "INVALID_ARGUMENT (the server enforces expect_compressed)"
        raise Failure(f"probe failed with {err.code()}: {err.details()}") from None
    return "OK (the server can't see request encodings; expect_compressed not enforced)"


# What a case expects on the wire: the compressed flags of the request
# messages and of the response messages, per call (None: not checked).
Expected = Tuple[Optional[List[List[int]]], Optional[List[List[int]]]]


def client_compressed_unary(stub: Any, m: Any) -> Expected:
    def request(expect: bool) -> Any:
        return m.SimpleRequest(
            expect_compressed=m.BoolValue(value=expect),
            response_type=m.COMPRESSABLE,
            response_size=LARGE_RESP,
            payload=m.Payload(body=bytes(LARGE_REQ)),
        )

    def check(response: Any, step: str) -> None:
        size = len(response.payload.body)
        if size != LARGE_RESP:
            raise Failure(f"{step}: response payload of {size} bytes, want {LARGE_RESP}")

    def probe() -> None:
        check(stub.UnaryCall(request(True), timeout=RPC_TIMEOUT), "probe")

    print("1. probe, uncompressed, expect_compressed=true:", _probe_outcome(probe))
    try:
        check(stub.UnaryCall(request(True), timeout=RPC_TIMEOUT, compression=grpc.Compression.Gzip), "step 2")
    except grpc.RpcError as err:
        raise Failure(f"step 2 (gzip, expect_compressed=true) failed: {err.code()}: {err.details()}") from None
    print("2. gzip, expect_compressed=true: OK, 314159 bytes back")
    try:
        check(stub.UnaryCall(request(False), timeout=RPC_TIMEOUT), "step 3")
    except grpc.RpcError as err:
        raise Failure(f"step 3 (uncompressed, expect_compressed=false) failed: {err.code()}: {err.details()}") from None
    print("3. uncompressed, expect_compressed=false: OK, 314159 bytes back")
    return [[0], [1], [0]], None


def client_compressed_streaming(stub: Any, m: Any) -> Expected:
    def message(size: int, expect: bool) -> Any:
        return m.StreamingInputCallRequest(expect_compressed=m.BoolValue(value=expect), payload=m.Payload(body=bytes(size)))

    def probe() -> None:
        response = stub.StreamingInputCall(iter([message(STREAM_SIZES[0], True)]), timeout=RPC_TIMEOUT)
        if response.aggregated_payload_size != STREAM_SIZES[0]:
            raise Failure(f"probe: aggregated_payload_size {response.aggregated_payload_size}, want {STREAM_SIZES[0]}")

    print("1. probe, uncompressed, expect_compressed=true:", _probe_outcome(probe))
    requests = [message(STREAM_SIZES[0], True), message(STREAM_SIZES[1], False)]
    try:
        response = stub.StreamingInputCall(iter(requests), timeout=RPC_TIMEOUT, compression=grpc.Compression.Gzip)
    except grpc.RpcError as err:
        raise Failure(f"step 2 (gzip stream) failed: {err.code()}: {err.details()}") from None
    want = sum(STREAM_SIZES)
    if response.aggregated_payload_size != want:
        raise Failure(f"step 2: aggregated_payload_size {response.aggregated_payload_size}, want {want}")
    print(f"2. gzip stream of 27182 (expect_compressed=true) + 45904 (false) bytes: OK, aggregated {want}")
    return [[0], [1, 1]], None


def server_compressed_unary(stub: Any, m: Any) -> Expected:
    def call(compressed: bool) -> None:
        request = m.SimpleRequest(
            response_compressed=m.BoolValue(value=compressed),
            response_type=m.COMPRESSABLE,
            response_size=LARGE_RESP,
            payload=m.Payload(body=bytes(LARGE_REQ)),
        )
        size = len(stub.UnaryCall(request, timeout=RPC_TIMEOUT).payload.body)
        if size != LARGE_RESP:
            raise Failure(f"response_compressed={compressed}: response payload of {size} bytes, want {LARGE_RESP}")
        print(f"response_compressed={str(compressed).lower()}: OK, {LARGE_RESP} bytes back")

    call(True)
    call(False)
    return None, [[1], [0]]


def server_compressed_streaming(stub: Any, m: Any) -> Expected:
    request = m.StreamingOutputCallRequest(
        response_parameters=[
            m.ResponseParameters(size=RESPONSE_SIZES[0], compressed=m.BoolValue(value=True)),
            m.ResponseParameters(size=RESPONSE_SIZES[1], compressed=m.BoolValue(value=False)),
        ]
    )
    sizes = tuple(len(r.payload.body) for r in stub.StreamingOutputCall(request, timeout=RPC_TIMEOUT))
    if sizes != RESPONSE_SIZES:
        raise Failure(f"response sizes {sizes}, want {RESPONSE_SIZES}")
    print(f"stream of {RESPONSE_SIZES[0]} (compressed) + {RESPONSE_SIZES[1]} (uncompressed) bytes: OK")
    return None, [[1, 0]]


def run(args: argparse.Namespace) -> None:
    pb = protos.load(pathlib.Path(args.gen) if args.gen else None)
    port = args.server_port
    tap: Optional[WireTap] = None
    if args.wire_check:
        if args.use_tls:
            raise Failure("--wire_check reads plaintext HTTP/2; it can't be used with --use_tls")
        tap = WireTap(port)
        port = tap.port
    target = f"{args.server_host}:{port}"
    if args.use_tls:
        roots = pathlib.Path(args.ca_file).read_bytes() if args.ca_file else None
        options = [("grpc.ssl_target_name_override", args.server_host_override)] if args.server_host_override else []
        channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(roots), options=options)
    else:
        channel = grpc.insecure_channel(target)
    try:
        with channel:
            stub = pb.test_pb2_grpc.TestServiceStub(channel)
            case = {
                "client_compressed_unary": client_compressed_unary,
                "client_compressed_streaming": client_compressed_streaming,
                "server_compressed_unary": server_compressed_unary,
                "server_compressed_streaming": server_compressed_streaming,
            }[args.test_case]
            want_requests, want_responses = case(stub, pb.messages_pb2)
        if tap is not None:
            for what, got, want in (("request", tap.flags(), want_requests), ("response", tap.response_flags(), want_responses)):
                if want is None:
                    continue
                if got != want:
                    raise Failure(f"wire check: {what} compressed flags per call {got}, want {want}")
                print(f"wire check: {what} compressed flags per call {got}, as intended")
    finally:
        if tap is not None:
            tap.close()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server_host", default="127.0.0.1")
    parser.add_argument("--server_port", type=int, required=True)
    parser.add_argument("--server_host_override", default="")
    parser.add_argument("--test_case", choices=CASES, required=True)
    parser.add_argument("--use_tls", action="store_true")
    parser.add_argument("--use_test_ca", action="store_true", help="accepted for compatibility; give --ca_file")
    parser.add_argument("--ca_file", default="")
    parser.add_argument("--wire_check", action="store_true", help="check compressed flags on the wire (plaintext)")
    parser.add_argument("--gen", help="directory of the generated code (reused if it's there)")
    args = parser.parse_args(argv)
    try:
        run(args)
    except Failure as err:
        print(f"FAIL {args.test_case}: {err}")
        return 1
    except grpc.RpcError as err:
        print(f"FAIL {args.test_case}: {err.code()}: {err.details()}")
        return 1
    print(f"PASS {args.test_case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
