"""A raw HTTP/2 client for tests that need what no gRPC client sends:
frames out of order, malformed headers, streams that never cancel or never
read, bytes that aren't HTTP/2 at all.

Frames are built with hyperframe and header blocks with hpack (the h2
project's codecs), and written to a plain socket; nothing checks that what
is sent makes sense. Reading decodes the server's frames into ``Frame``
records, answering its SETTINGS and PINGs so that the server sees a live
peer, never a stalled one (unless ``auto_ack`` is off).
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import hpack
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

Headers = Sequence[Tuple[str, str]]


def grpc_message(payload: bytes, compressed: bool = False, declared_length: Optional[int] = None) -> bytes:
    """A gRPC length-prefixed message; declared_length may lie."""
    length = len(payload) if declared_length is None else declared_length
    return struct.pack(">BI", int(compressed), length) + payload


def request_headers(path: str, *, timeout: Optional[str] = None, extra: Headers = ()) -> List[Tuple[str, str]]:
    """The headers of a gRPC request, as grpc-go's client sends them."""
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    if timeout is not None:
        headers.append(("grpc-timeout", timeout))
    return headers + list(extra)


@dataclass
class Received:
    """One frame from the server; ``headers`` is the decoded block of a
    HEADERS frame (CONTINUATIONs joined)."""

    kind: str  # "headers", "data", "rst", "goaway", "settings", "ping", "window", "other"
    stream_id: int
    end_stream: bool = False
    headers: Dict[str, str] = field(default_factory=dict)
    data: bytes = b""
    error_code: int = 0
    settings: Dict[int, int] = field(default_factory=dict)  # of a SETTINGS frame


class Closed(Exception):
    """The server closed the connection."""


class RawH2:
    """One client connection to 127.0.0.1:port. Use as a context manager."""

    def __init__(self, port: int, *, preface: bool = True, auto_ack: bool = True, timeout: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.auto_ack = auto_ack
        self._encoder = hpack.Encoder()
        self._decoder = hpack.Decoder()
        self._buf = b""
        self._block: Optional[Tuple[int, bool, bytes]] = None  # a header block awaiting CONTINUATION
        if preface:
            self.send_bytes(PREFACE + SettingsFrame(0).serialize())

    def __enter__(self) -> "RawH2":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    # -- sending -------------------------------------------------------------

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, *frames: Frame) -> None:
        self.send_bytes(b"".join(f.serialize() for f in frames))

    def header_block(self, headers: Headers) -> bytes:
        return self._encoder.encode(list(headers))

    def headers(self, stream_id: int, headers: Headers, *, end_stream: bool = False) -> None:
        flags = ["END_HEADERS"] + (["END_STREAM"] if end_stream else [])
        self.send(HeadersFrame(stream_id, self.header_block(headers), flags=flags))

    def data(self, stream_id: int, data: bytes, *, end_stream: bool = True) -> None:
        self.send(DataFrame(stream_id, data, flags=["END_STREAM"] if end_stream else []))

    def unary(self, stream_id: int, path: str, payload: bytes = b"", *, timeout: Optional[str] = None) -> None:
        """A whole unary request: headers, one message, end of stream."""
        self.headers(stream_id, request_headers(path, timeout=timeout))
        self.data(stream_id, grpc_message(payload))

    def reset(self, stream_id: int, error_code: int = 0x8) -> None:
        self.send(RstStreamFrame(stream_id, error_code))

    # -- receiving -----------------------------------------------------------

    def _read_exact(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            self.sock.settimeout(max(0.001, deadline - time.monotonic()))
            chunk = self.sock.recv(65536)
            if not chunk:
                raise Closed("the server closed the connection")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def receive(self, timeout: float = 10.0) -> Received:
        """The next frame; raises Closed at the end of the connection and
        socket.timeout if nothing arrives in time."""
        deadline = time.monotonic() + timeout
        while True:
            frame, length = Frame.parse_frame_header(memoryview(self._read_exact(9, deadline)), strict=False)
            frame.parse_body(memoryview(self._read_exact(length, deadline)))
            got = self._interpret(frame)
            if got is not None:
                return got

    def _interpret(self, frame: Frame) -> Optional[Received]:
        if isinstance(frame, (HeadersFrame, ContinuationFrame)):
            if isinstance(frame, HeadersFrame):
                self._block = (frame.stream_id, "END_STREAM" in frame.flags, frame.data)
            elif self._block is not None:
                self._block = (self._block[0], self._block[1], self._block[2] + frame.data)
            if "END_HEADERS" not in frame.flags or self._block is None:
                return None
            stream_id, end, block = self._block
            self._block = None
            decoded = {str(k): str(v) for k, v in self._decoder.decode(block, raw=False)}
            return Received("headers", stream_id, end, headers=decoded)
        if isinstance(frame, DataFrame):
            if frame.flow_controlled_length and self.auto_ack:
                self._ack(WindowUpdateFrame(0, frame.flow_controlled_length))
            return Received("data", frame.stream_id, "END_STREAM" in frame.flags, data=frame.data)
        if isinstance(frame, RstStreamFrame):
            return Received("rst", frame.stream_id, error_code=frame.error_code)
        if isinstance(frame, GoAwayFrame):
            return Received("goaway", 0, error_code=frame.error_code, data=frame.additional_data)
        if isinstance(frame, SettingsFrame):
            if "ACK" not in frame.flags and self.auto_ack:
                self._ack(SettingsFrame(0, flags=["ACK"]))
            return Received("settings", 0, settings=dict(frame.settings))
        if isinstance(frame, PingFrame):
            if "ACK" not in frame.flags and self.auto_ack:
                self._ack(PingFrame(0, frame.opaque_data, flags=["ACK"]))
            return Received("ping", 0, data=frame.opaque_data)
        if isinstance(frame, WindowUpdateFrame):
            return Received("window", frame.stream_id)
        return Received("other", frame.stream_id)

    def _ack(self, frame: Frame) -> None:
        """Sends what auto_ack answers; a server that has closed the
        connection already needs none (what it sent is still read)."""
        try:
            self.send(frame)
        except OSError:
            pass

    def collect(self, until: Callable[[List[Received]], bool], timeout: float = 10.0) -> List[Received]:
        """Frames until ``until(frames)`` holds or the connection closes;
        AssertionError if neither happens in time."""
        deadline = time.monotonic() + timeout
        frames: List[Received] = []
        while not until(frames):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no end within {timeout}s; frames so far: {frames}")
            try:
                frames.append(self.receive(left))
            except Closed:
                break
            except socket.timeout:
                continue
        return frames

    def statuses(self, stream_ids: Iterable[int], timeout: float = 10.0) -> Dict[int, Optional[str]]:
        """The grpc-status of each stream's trailers, or None for a stream
        the server reset; waits until every stream has ended."""
        wanted = set(stream_ids)
        out: Dict[int, Optional[str]] = {}

        def done(frames: List[Received]) -> bool:
            # Called after each new frame: only the last one is news.
            f = frames[-1] if frames else None
            if f is not None and f.stream_id in wanted and f.stream_id not in out:
                if f.kind == "rst":
                    out[f.stream_id] = None
                elif f.kind == "headers" and f.end_stream:
                    out[f.stream_id] = f.headers.get("grpc-status")
            return wanted <= out.keys()

        self.collect(done, timeout)
        return out


def connection_closed(conn: RawH2, timeout: float = 10.0) -> Tuple[bool, List[Received]]:
    """Reads until the server closes the connection; (closed, frames)."""
    frames: List[Received] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            frames.append(conn.receive(deadline - time.monotonic()))
        except (Closed, ConnectionResetError):
            return True, frames
        except socket.timeout:
            continue
    return False, frames
