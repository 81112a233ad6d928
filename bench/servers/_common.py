"""Pieces every benchmark server shares: options, loopback check, SIGTERM
wait, the four methods' names and the streaming request's format."""

import argparse
import ipaddress
import signal
import sys
import threading

ECHO_METHOD = "/echo.Echo/Say"  # unary: the request comes back
COUNT_METHOD = "/echo.Echo/Count"  # server streaming: see count_request()
COLLECT_METHOD = "/echo.Echo/Collect"  # client streaming: the last request message comes back
CHAT_METHOD = "/echo.Echo/Chat"  # bidi streaming: every request message comes back, in turn
SERVICE = "echo.Echo"


def count_request(n: int, body: bytes) -> bytes:
    """The request of a /echo.Echo/Count call: N as 4 big-endian bytes, then the body."""
    return n.to_bytes(4, "big") + body


def parse_count(request: bytes) -> tuple[int, bytes]:
    """(N, body) from a /echo.Echo/Count request (a short request: N = 0)."""
    if len(request) < 4:
        return 0, b""
    return int.from_bytes(request[:4], "big"), request[4:]


def check_loopback(host: str) -> None:
    if host == "localhost":
        return
    try:
        ok = ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        sys.exit(f"refusing to listen on {host!r}: the benchmarks use loopback addresses only")


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--host", default="127.0.0.1", help="loopback address to listen on")
    p.add_argument("--port", type=int, default=0, help="port (0: pick a free one)")
    p.add_argument("--grace", type=float, default=1.0, help="seconds to let calls finish on SIGTERM")
    p.add_argument("--tls-cert", help="PEM certificate chain file: serve TLS (with --tls-key)")
    p.add_argument("--tls-key", help="PEM private key file")
    return p


def tls_pair(args) -> "tuple[bytes, bytes] | None":
    """(key, chain) PEM bytes from --tls-key / --tls-cert, or None for plaintext."""
    if not args.tls_cert and not args.tls_key:
        return None
    if not (args.tls_cert and args.tls_key):
        sys.exit("--tls-cert and --tls-key go together")
    with open(args.tls_key, "rb") as f:
        key = f.read()
    with open(args.tls_cert, "rb") as f:
        chain = f.read()
    return key, chain


def add_port(server, args, credentials_factory) -> int:
    """add_insecure_port, or add_secure_port with credentials_factory([(key, chain)])."""
    address = f"{args.host}:{args.port}"
    pair = tls_pair(args)
    if pair is None:
        return server.add_insecure_port(address)
    return server.add_secure_port(address, credentials_factory([pair]))


def install_stop_signals() -> threading.Event:
    """Returns an event that is set on SIGTERM or SIGINT."""
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


def announce(port: int) -> None:
    print(f"PORT {port}", flush=True)


def wait(stop: threading.Event) -> None:
    # A timed wait, so the main thread runs the Python signal handler promptly
    # whatever the extension's threads do with signals.
    while not stop.wait(0.2):
        pass
