"""Scenarios that read response compression off the wire.

grpcio's client API doesn't tell whether a response travelled compressed,
so the compression scenarios call through a WireTap (tests/diff/wiretap.py)
and compare the compressed flag of every response message, per call, along
with what the client received. BODY is compressible and non-empty:
grpc-core sends a message uncompressed when compressing doesn't shrink it.
"""

from typing import Any, Callable, List, Optional, Sequence, Tuple

import grpc

from diff.harness import method
from diff.wiretap import WireTap

BODY = b"compressible " * 100


def on_wire(
    drive: Callable[[grpc.Channel], Any],
    request_compression: Optional[grpc.Compression] = None,
    options: Optional[Sequence[Tuple[str, Any]]] = None,
) -> Callable[[Any], Tuple[Any, List[List[int]]]]:
    """A scenario: drive(channel) with a channel through a wire tap in front
    of the run's server; gives (what drive returned, the response flags per
    call)."""

    def scenario(run: Any) -> Tuple[Any, List[List[int]]]:
        tap = WireTap(run.port)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{tap.port}", compression=request_compression, options=options) as channel:
                got = drive(channel)
            return got, tap.response_flags()
        finally:
            tap.close()

    return scenario


def calls(names: Sequence[Tuple[str, bool]]) -> Callable[[grpc.Channel], List[Any]]:
    """A drive for on_wire: calls each (method name, streaming) with BODY and
    gives what each answered (a list of messages for a stream)."""

    def drive(channel: grpc.Channel) -> List[Any]:
        got: List[Any] = []
        for name, streaming in names:
            if streaming:
                got.append(list(channel.unary_stream(method(name))(BODY, timeout=5)))
            else:
                got.append(channel.unary_unary(method(name))(BODY, timeout=5))
        return got

    return drive
