"""The gRPC interop test cases (tests/interop), run by grpc-go's interop
client against pygrpc_native.server(), pygrpc_native.aio.server() and the
grpcio controls, in plaintext and TLS. Prints the results matrix; fails on
any failed case. See tests/interop/README.md.

The first run builds grpc-go's interop client into build/interop/ through
the Go module proxy (about a minute); later runs reuse it.
"""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "interop"))
import run_matrix  # noqa: E402

# Building the client (first run only) is bounded by run_matrix.BUILD_TIMEOUT;
# the matrix itself takes seconds, and every step of it has a time limit.
pytestmark = pytest.mark.timeout(run_matrix.BUILD_TIMEOUT + 300)

# The standard field numbers of the grpc.testing messages: what makes
# proto/grpc/testing wire-compatible with every implementation's client.
STANDARD_FIELDS = {
    "BoolValue": {"value": 1},
    "Payload": {"type": 1, "body": 2},
    "EchoStatus": {"code": 1, "message": 2},
    "SimpleRequest": {
        "response_type": 1, "response_size": 2, "payload": 3, "fill_username": 4, "fill_oauth_scope": 5,
        "response_compressed": 6, "response_status": 7, "expect_compressed": 8, "fill_server_id": 9,
    },
    "SimpleResponse": {"payload": 1, "username": 2, "oauth_scope": 3, "server_id": 4, "hostname": 6},
    "StreamingInputCallRequest": {"payload": 1, "expect_compressed": 2},
    "StreamingInputCallResponse": {"aggregated_payload_size": 1},
    "ResponseParameters": {"size": 1, "interval_us": 2, "compressed": 3},
    "StreamingOutputCallRequest": {"response_type": 1, "response_parameters": 2, "payload": 3, "response_status": 7},
    "StreamingOutputCallResponse": {"payload": 1},
}


def test_protos_use_the_standard_numbers(tmp_path):
    import subprocess

    # In a subprocess: the generated modules go into a descriptor pool of
    # their own, not this process's.
    script = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import protos\n"
        "pb = protos.load(sys.argv[2]); fd = pb.messages_pb2.DESCRIPTOR\n"
        "print(json.dumps({'package': fd.package, 'messages': {n: {f.name: f.number for f in m.fields}\n"
        "  for n, m in fd.message_types_by_name.items()},\n"
        "  'services': {s.full_name: [m.name for m in s.methods] for s in pb.test_pb2.DESCRIPTOR.services_by_name.values()}}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(run_matrix.HERE), str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    import json

    got = json.loads(out)
    assert got["package"] == "grpc.testing"
    assert got["messages"] == STANDARD_FIELDS
    assert got["services"] == {
        "grpc.testing.TestService": [
            "EmptyCall", "UnaryCall", "StreamingOutputCall", "StreamingInputCall",
            "FullDuplexCall", "HalfDuplexCall", "UnimplementedCall",
        ],
        "grpc.testing.UnimplementedService": ["UnimplementedCall"],
    }


def test_interop_matrix(capsys, tmp_path):
    progress = []
    results, notes = run_matrix.run(work=tmp_path, log=progress.append)
    table = run_matrix.render(results, notes)
    with capsys.disabled():
        print("\n\ngRPC interop matrix (tests/interop)\n\n" + table + "\n")
        print("\n".join(line for line in progress if "failed, then passed" in line))

    # Every case has a cell for every server and transport.
    cells = {(r.case, r.impl, r.transport) for r in results}
    expected = {(c, i, t) for c in run_matrix.ALL_CASES for i in run_matrix.IMPLS for t in run_matrix.TRANSPORTS}
    assert cells == expected
    failures = run_matrix.describe_failures(results)
    assert not failures, "interop cases failed:\n" + failures
