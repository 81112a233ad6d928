"""WireTap: see what a gRPC client and server put on the wire.

grpcio's API hides whether a message travelled compressed, so tests that
compare response compression (tests/diff/compression.py) and the
interop client of the compressed cases (tests/interop/compressed_client.py)
read the compressed flag of each gRPC message off the plaintext HTTP/2
stream, through this relay.
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Dict, List


class WireTap:
    """A TCP relay on 127.0.0.1 that parses the HTTP/2 frames both ways and
    records, per stream, the compressed flag of every gRPC message: the
    client's in ``flags()``, the server's in ``response_flags()``."""

    PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.streams: Dict[int, List[int]] = {}  # stream id -> flags, in order
        self.responses: Dict[int, List[int]] = {}  # the same, server to client
        self.sockets: List[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def flags(self) -> List[List[int]]:
        """The flags of the client's messages, per stream that carried any,
        by stream id."""
        with self.lock:
            return [self.streams[k] for k in sorted(self.streams) if self.streams[k]]

    def response_flags(self) -> List[List[int]]:
        """flags() for the server's messages."""
        with self.lock:
            return [self.responses[k] for k in sorted(self.responses) if self.responses[k]]

    def close(self) -> None:
        for s in self.sockets:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()  # the client sees the server's refusal
                continue
            server.settimeout(None)
            self.sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, self.streams), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, self.responses), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: Dict[int, List[int]]) -> None:
        buf = b""
        preface_left = len(self.PREFACE) if record is self.streams else 0
        pending: Dict[int, bytes] = {}
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                buf += data
                if preface_left:
                    cut = min(preface_left, len(buf))
                    buf, preface_left = buf[cut:], preface_left - cut
                while len(buf) >= 9:
                    length = int.from_bytes(buf[:3], "big")
                    if len(buf) < 9 + length:
                        break
                    ftype, fflags = buf[3], buf[4]
                    stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                    payload, buf = buf[9 : 9 + length], buf[9 + length :]
                    if ftype == 0:  # DATA
                        if fflags & 0x8:  # PADDED
                            payload = payload[1 : len(payload) - payload[0]]
                        self._messages(record, stream, pending, payload)
                # Forwarded only once parsed, so that what a peer has received
                # is already recorded.
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _messages(self, record: Dict[int, List[int]], stream: int, pending: Dict[int, bytes], payload: bytes) -> None:
        data = pending.get(stream, b"") + payload
        while len(data) >= 5:
            flag, length = data[0], struct.unpack(">I", data[1:5])[0]
            if len(data) < 5 + length:
                break
            with self.lock:
                record.setdefault(stream, []).append(flag)
            data = data[5 + length :]
        pending[stream] = data
