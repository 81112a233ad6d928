"""Differential tests: addresses, several ports with their own credentials,
and connection limits on grpc.aio.server() and pygrpc_native.aio.server()
(the aio counterparts of test_server_diff_ports.py and
test_server_diff_connections.py)."""

import asyncio
import time
import uuid
from concurrent import futures

import grpc
import grpc.aio
import pytest

import pygrpc_native
from diff.aio_harness import WAIT, LoopThread, factory, for_both, method
from tls_certs import make_pki

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


async def _peer_and_security(req, ctx):
    security = ctx.auth_context().get("transport_security_type", [b"?"])[0]
    return ctx.peer().encode() + b" " + security


async def _slow(req, ctx):
    await asyncio.sleep(float(req))
    return ctx.peer().encode()


def _serve(kind, ports, **kwargs):
    """Runs a server of kind on its own loop with the given ports
    ((add_method_name, args) pairs); returns (loop, server, bound ports)."""
    loop = LoopThread()
    pool = futures.ThreadPoolExecutor(2)

    async def start():
        server = factory(kind)(pool, **kwargs)
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "diff.Diff",
                    {
                        "Peer": grpc.unary_unary_rpc_method_handler(_peer_and_security),
                        "Slow": grpc.unary_unary_rpc_method_handler(_slow),
                    },
                ),
            )
        )
        bound = [getattr(server, add)(*args) for add, args in ports]
        await server.start()
        return server, bound

    server, bound = loop.run(start())
    return loop, server, bound


def _stop(loop, server):
    loop.bounded(server.stop(0), WAIT)
    loop.close()


def _call(target, credentials=None, name="Peer", request=b"", **options):
    channel = grpc.secure_channel(target, credentials, options=list(options.items())) if credentials else grpc.insecure_channel(target)
    with channel:
        try:
            return channel.unary_unary(method(name))(request, timeout=10).decode()
        except grpc.RpcError as err:
            return err.code()


def test_unix_sockets_and_tcp_on_one_server(tmp_path):
    def check(kind):
        abstract = f"unix-abstract:pgn-aio-{uuid.uuid4().hex}"
        path = f"unix://{tmp_path}/{kind}.sock"
        loop, server, bound = _serve(
            kind, [("add_insecure_port", (path,)), ("add_insecure_port", (abstract,)), ("add_insecure_port", ("127.0.0.1:0",))]
        )
        try:
            seen = [_call(path), _call(abstract), _call(f"127.0.0.1:{bound[2]}").split(":")[0]]
        finally:
            _stop(loop, server)
        return bound[:2], bound[2] > 1, seen, list(tmp_path.iterdir())

    assert for_both(check) == ([1, 1], True, ["unix: insecure", "unix: insecure", "ipv4"], [])


@pytest.fixture(scope="module")
def pki():
    return make_pki()


def test_secure_and_insecure_ports(pki):
    def check(kind):
        make = grpc.ssl_server_credentials if kind == "grpcio" else pygrpc_native.ssl_server_credentials
        creds = make([(pki.server.key, pki.server.chain)])
        loop, server, (plain, secure) = _serve(
            kind, [("add_insecure_port", ("127.0.0.1:0",)), ("add_secure_port", ("127.0.0.1:0", creds))]
        )
        tls = grpc.ssl_channel_credentials(pki.ca.cert)
        try:
            seen = [
                _call(f"127.0.0.1:{plain}"),
                _call(f"127.0.0.1:{secure}", tls, **{"grpc.ssl_target_name_override": "localhost"}),
                _call(f"127.0.0.1:{secure}"),
            ]
        finally:
            _stop(loop, server)
        return [s.split()[1] if isinstance(s, str) else s for s in seen]

    assert for_both(check) == ["insecure", "ssl", SC.UNAVAILABLE]


def test_max_connection_age_with_grace():
    def check(kind):
        options = [("grpc.max_connection_age_ms", 400), ("grpc.max_connection_age_grace_ms", 10_000)]
        loop, server, (port,) = _serve(kind, [("add_insecure_port", ("127.0.0.1:0",))], options=options)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                peer = channel.unary_unary(method("Peer"))
                first = peer(b"", timeout=5)
                slow = channel.unary_unary(method("Slow")).future(b"2.0", timeout=20)
                time.sleep(1.0)
                during = peer(b"", timeout=5)
                return slow.result() == first.split(b" ")[0], during != first
        finally:
            _stop(loop, server)

    assert for_both(check) == (True, True)


def test_max_allowed_incoming_connections():
    def check(kind):
        options = [("grpc.max_allowed_incoming_connections", 1)]
        loop, server, (port,) = _serve(kind, [("add_insecure_port", ("127.0.0.1:0",))], options=options)
        target = f"127.0.0.1:{port}"
        local = [("grpc.use_local_subchannel_pool", 1)]
        first, second = grpc.insecure_channel(target, options=local), grpc.insecure_channel(target, options=local)
        try:
            a = first.unary_unary(method("Peer"))(b"", timeout=5) and "OK"
            try:
                b = second.unary_unary(method("Peer"))(b"", timeout=2) and "OK"
            except grpc.RpcError as err:
                b = err.code()
            return a, b
        finally:
            first.close()
            second.close()
            _stop(loop, server)

    assert for_both(check) == ("OK", SC.UNAVAILABLE)


def test_empty_address():
    def check(kind):
        loop = LoopThread()
        try:

            async def add():
                server = factory(kind)()
                try:
                    server.add_insecure_port("")
                except RuntimeError as exc:
                    return str(exc)
                finally:
                    await server.stop(None)

            return loop.run(add())
        finally:
            loop.close()

    assert for_both(check).startswith("Failed to bind to address ;")




def test_start_twice_and_after_stop():
    def check(kind):
        loop = LoopThread()

        async def attempt(stop_first):
            server = factory(kind)()
            server.add_insecure_port("127.0.0.1:0")
            await server.start()
            if stop_first:
                await server.stop(None)
            try:
                await server.start()
                return "started"
            except Exception as exc:  # noqa: BLE001
                return type(exc).__name__, str(exc)
            finally:
                await server.stop(None)

        try:
            return [loop.run(attempt(False)), loop.run(attempt(True))]
        finally:
            loop.close()

    assert for_both(check) == ["started", ("UsageError", "Server not in ready state")]


def test_max_connection_idle_and_age_grace():
    """An idle connection is closed after grpc.max_connection_idle_ms; a call
    that outlives the age plus its grace ends with UNAVAILABLE."""

    def check(kind):
        options = [
            ("grpc.max_connection_idle_ms", 300),
            ("grpc.max_connection_age_ms", 1500),
            ("grpc.max_connection_age_grace_ms", 300),
        ]
        loop, server, (port,) = _serve(kind, [("add_insecure_port", ("127.0.0.1:0",))], options=options)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                peer = channel.unary_unary(method("Peer"))
                first = peer(b"", timeout=5)
                time.sleep(1.0)  # idle past the limit
                second = peer(b"", timeout=5)
                try:
                    channel.unary_unary(method("Slow"))(b"5.0", timeout=20)
                    slow = "OK"
                except grpc.RpcError as err:
                    slow = err.code()
                return second != first, slow
        finally:
            _stop(loop, server)

    assert for_both(check) == (True, SC.UNAVAILABLE)
