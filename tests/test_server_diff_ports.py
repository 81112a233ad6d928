"""Differential tests: the addresses and ports of grpc.server() and
pygrpc_native.server() — Unix sockets (unix:path, unix:///path,
unix-abstract:name; socket file mode, stale socket removal, removal at
stop; context.peer()), several ports on one server with their own
credentials, what add_*_port() returns, refused addresses,
grpc.max_allowed_incoming_connections, and start() after stop()."""

import os
import socket
import uuid
from concurrent import futures

import grpc
import pytest

import pygrpc_native
from diff.harness import WAIT, factory, for_both, method, peer_shape
from tls_certs import make_pki

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


def _peer_and_security(req, ctx):
    security = ctx.auth_context().get("transport_security_type", [b"?"])[0]
    return ctx.peer().encode() + b" " + security


def _server(kind, **kwargs):
    pool = futures.ThreadPoolExecutor(4, thread_name_prefix=f"ports-{kind}")
    server = factory(kind)(pool, **kwargs)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("diff.Diff", {"Peer": grpc.unary_unary_rpc_method_handler(_peer_and_security)}),)
    )
    return server, pool


def _stop(server, pool):
    server.stop(0).wait(WAIT)
    pool.shutdown(wait=False, cancel_futures=True)


def _call(target, credentials=None, **options):
    channel = grpc.secure_channel(target, credentials, options=list(options.items())) if credentials else grpc.insecure_channel(target)
    with channel:
        try:
            return channel.unary_unary(method("Peer"))(b"", timeout=5).decode()
        except grpc.RpcError as err:
            return err.code()


def test_unix_socket_addresses(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def check(kind):
        d = tmp_path / kind
        d.mkdir()
        abstract = f"pgn-test-{uuid.uuid4().hex}"
        addresses = [f"unix:{d}/a.sock", f"unix://{d}/b.sock", f"unix:{kind}/rel.sock", f"unix-abstract:{abstract}"]
        server, pool = _server(kind)
        try:
            ports = [server.add_insecure_port(a) for a in addresses]
            server.start()
            modes = sorted(oct(os.stat(p).st_mode) for p in (d / "a.sock", d / "b.sock", d / "rel.sock"))
            peers = [_call(a) for a in addresses]
        finally:
            _stop(server, pool)
        left = sorted(p.name for p in d.iterdir())
        return ports, modes, peers, left

    ports, modes, peers, left = for_both(check)
    assert ports == [1, 1, 1, 1]
    assert peers == ["unix: insecure"] * 4
    assert left == []  # both remove their socket files at stop


def test_stale_socket_file_is_replaced_other_files_are_not(tmp_path):
    def check(kind):
        stale = tmp_path / f"{kind}-stale.sock"
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(stale))
        s.close()  # leaves the file behind, as a crashed server would
        regular = tmp_path / f"{kind}-regular.sock"
        regular.write_text("not a socket")
        server, pool = _server(kind)
        try:
            port = server.add_insecure_port(f"unix:{stale}")
            with pytest.raises(RuntimeError, match="Failed to bind to address"):
                server.add_insecure_port(f"unix:{regular}")
            server.start()
            peer = _call(f"unix:{stale}")
        finally:
            _stop(server, pool)
        return port, peer, regular.read_text()

    assert for_both(check) == (1, "unix: insecure", "not a socket")


def test_several_ports_serve_the_same_methods(tmp_path):
    def check(kind):
        server, pool = _server(kind)
        try:
            v4 = server.add_insecure_port("127.0.0.1:0")
            v6 = server.add_insecure_port("[::1]:0")
            unix = server.add_insecure_port(f"unix:{tmp_path}/{kind}.sock")
            server.start()
            peers = [_call(f"127.0.0.1:{v4}"), _call(f"[::1]:{v6}"), _call(f"unix:{tmp_path}/{kind}.sock")]
        finally:
            _stop(server, pool)
        return v4 > 1, v6 > 1, v4 != v6, unix, [peer_shape(p.split()[0]) if p.startswith("ip") else p for p in peers]

    ref = for_both(check)
    assert ref == (True, True, True, 1, ["ipv4:127.0.0.1:<port>", "ipv6:%5B::1%5D:<port>", "unix: insecure"])


@pytest.fixture(scope="module")
def pki():
    return make_pki()


def test_secure_and_insecure_ports_each_with_their_own_credentials(pki):
    def check(kind):
        make = grpc.ssl_server_credentials if kind == "grpcio" else pygrpc_native.ssl_server_credentials
        server, pool = _server(kind)
        try:
            plain = server.add_insecure_port("127.0.0.1:0")
            secure = server.add_secure_port("127.0.0.1:0", make([(pki.server.key, pki.server.chain)]))
            plain2 = server.add_insecure_port("127.0.0.1:0")  # later ports are plaintext again
            server.start()
            tls = grpc.ssl_channel_credentials(pki.ca.cert)
            override = {"grpc.ssl_target_name_override": "localhost"}
            seen = [
                _call(f"127.0.0.1:{plain}"),
                _call(f"127.0.0.1:{secure}", tls, **override),
                _call(f"127.0.0.1:{plain2}"),
                _call(f"127.0.0.1:{secure}"),  # plaintext client on the TLS port
                _call(f"127.0.0.1:{plain}", tls, **override),  # TLS client on a plaintext port
            ]
        finally:
            _stop(server, pool)
        return [s.split()[1] if isinstance(s, str) else s for s in seen]

    assert for_both(check) == ["insecure", "ssl", "insecure", SC.UNAVAILABLE, SC.UNAVAILABLE]


@pytest.mark.parametrize("address", ["", "127.0.0.1:bad"], ids=["empty", "bad-port"])
def test_refused_addresses(address):
    def check(kind):
        server, pool = _server(kind)
        try:
            server.add_insecure_port(address)
        except Exception as exc:  # noqa: BLE001
            return type(exc).__name__, str(exc).startswith(f"Failed to bind to address {address}")
        finally:
            _stop(server, pool)
        return "bound"

    assert for_both(check) == ("RuntimeError", True)


def test_empty_address_message():
    def check(kind):
        server, pool = _server(kind)
        try:
            server.add_insecure_port("")
        except RuntimeError as exc:
            return str(exc)
        finally:
            _stop(server, pool)

    assert for_both(check).startswith("Failed to bind to address ;")


def test_max_allowed_incoming_connections():
    def check(kind):
        server, pool = _server(kind, options=[("grpc.max_allowed_incoming_connections", 1)])
        try:
            port = server.add_insecure_port("127.0.0.1:0")
            server.start()
            target = f"127.0.0.1:{port}"
            # Separate connections: each channel gets its own subchannel.
            first = grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
            second = grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
            try:
                a = first.unary_unary(method("Peer"))(b"", timeout=5) and "OK"
                try:
                    second.unary_unary(method("Peer"))(b"", timeout=2)
                    b = "OK"
                except grpc.RpcError as err:
                    b = err.code()
                again = first.unary_unary(method("Peer"))(b"", timeout=5) and "OK"
            finally:
                first.close()
                second.close()
        finally:
            _stop(server, pool)
        return a, b, again

    assert for_both(check) == ("OK", SC.UNAVAILABLE, "OK")


def test_start_after_stop_and_twice():
    def check(kind):
        results = []
        for stop_first in (False, True):
            server, pool = _server(kind)
            server.add_insecure_port("127.0.0.1:0")
            server.start()
            if stop_first:
                server.stop(None)
            try:
                server.start()
                results.append("started")
            except Exception as exc:  # noqa: BLE001
                results.append((type(exc).__name__, str(exc)))
            finally:
                _stop(server, pool)
        return results

    assert for_both(check) == [
        ("ValueError", "Cannot start already-started server!"),
        ("ValueError", "the server has already started"),
    ]


def test_localhost_binds_both_loopbacks():
    def check(kind):
        server, pool = _server(kind)
        try:
            port = server.add_insecure_port("localhost:0")
            server.start()
            return [peer_shape(_call(target).split()[0]) for target in (f"127.0.0.1:{port}", f"[::1]:{port}")]
        finally:
            _stop(server, pool)

    assert for_both(check) == ["ipv4:127.0.0.1:<port>", "ipv6:%5B::1%5D:<port>"]
