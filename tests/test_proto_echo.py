"""proto/echo.proto compiles with grpcio-tools, and generated grpcio stubs
talk to a NativeGrpcFront that parses and builds the messages itself."""

import importlib
import pathlib
import sys

import grpc
import pytest

from pygrpc_native import EVENT_CALL

from lowlevel_helpers import WAIT, serving

pytestmark = pytest.mark.timeout(60)

PROTO_DIR = pathlib.Path(__file__).resolve().parent.parent / "proto"


@pytest.fixture(scope="module")
def echo_modules(tmp_path_factory):
    protoc = pytest.importorskip("grpc_tools.protoc")
    out = tmp_path_factory.mktemp("echo_gen")
    rc = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            str(PROTO_DIR / "echo.proto"),
        ]
    )
    assert rc == 0, "protoc failed on proto/echo.proto"
    sys.path.insert(0, str(out))
    try:
        pb2 = importlib.import_module("echo_pb2")
        pb2_grpc = importlib.import_module("echo_pb2_grpc")
    finally:
        sys.path.remove(str(out))
    return pb2, pb2_grpc


def test_generated_stubs_against_the_front(echo_modules):
    pb2, pb2_grpc = echo_modules
    methods = [("/echo.Echo/Say", False), ("/echo.Echo/Count", True)]

    def handler(front, event):
        kind, call_id, method_id, payload, _ = event
        if kind != EVENT_CALL:
            return
        if method_id == 0:
            req = pb2.EchoRequest.FromString(payload)
            front.respond(call_id, pb2.EchoReply(message=req.message).SerializeToString())
        else:
            req = pb2.CountRequest.FromString(payload)
            for i in range(req.count):
                front.send_message(call_id, pb2.EchoReply(message=req.message, index=i).SerializeToString())
            front.finish(call_id)

    with serving(handler, methods) as s, s.channel() as ch:
        stub = pb2_grpc.EchoStub(ch)
        assert stub.Say(pb2.EchoRequest(message="héllo"), timeout=WAIT).message == "héllo"
        replies = list(stub.Count(pb2.CountRequest(message="n", count=4), timeout=WAIT))
        assert [(r.message, r.index) for r in replies] == [("n", i) for i in range(4)]
