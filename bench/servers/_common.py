"""Pieces every benchmark server shares: options, loopback check, SIGTERM wait."""

import argparse
import ipaddress
import signal
import sys
import threading

ECHO_METHOD = "/echo.Echo/Say"


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
    return p


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
