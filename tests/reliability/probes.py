"""The reliability probes. Each runs against one started ServerProcess and
returns its figures as a dict; tests/reliability/test_*.py assert on them,
report.py tabulates them for ours and the control (grpc.server()).

A probe never asserts itself: it measures, so that the report can show a
control's figures even where they would fail our bar.
"""

from __future__ import annotations

import random
import resource
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import grpc
from h2_raw import PREFACE, Closed, RawH2, grpc_message, request_headers
from hyperframe.frame import ContinuationFrame, DataFrame, HeadersFrame, PingFrame, RstStreamFrame, SettingsFrame, WindowUpdateFrame

from harness import BIDI, COUNT, SAY, ServerProcess, growth_percent, percentile, settled_stats
from scale import Scale

Figures = Dict[str, Any]

OK = "0"


# -- load and soak -------------------------------------------------------------


def load_soak(server: ServerProcess, scale: Scale, clients: int = 4) -> Figures:
    """Calls at full speed from `clients` threads (one connection each) for
    scale.soak_seconds, sampling the server's RSS, OS threads and goroutines
    every second. Growth compares the median of the last three samples with
    the median of the three taken once the first third (the warm-up) is
    over: as a percentage for RSS, as a count for threads and goroutines."""
    stop = threading.Event()
    done = [0] * clients
    failed = [0] * clients
    payload = b"s" * 100

    def client(i: int) -> None:
        with server.channel() as ch:
            say = ch.unary_unary(SAY)
            while not stop.is_set():
                try:
                    say(payload, timeout=10)
                    done[i] += 1
                except grpc.RpcError:
                    failed[i] += 1

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    samples: List[Figures] = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < scale.soak_seconds and sum(done) < scale.soak_max_calls:
        time.sleep(1.0)
        samples.append(server.stats())
    stop.set()
    for t in threads:
        t.join(30)
    elapsed = time.monotonic() - t0
    warm = samples[len(samples) // 3 :]

    def ends(key: str) -> tuple[float, float]:
        values = [_sample_value(s, key) for s in warm]
        return _median(values[:3]), _median(values[-3:])

    def growth(key: str) -> float:
        return growth_percent(*ends(key))

    def added(key: str) -> float:
        first, last = ends(key)
        return last - first

    return {
        "calls": sum(done),
        "failed": sum(failed),
        "calls_per_s": round(sum(done) / elapsed),
        "seconds": round(elapsed, 1),
        "rss_mib": round(_sample_value(samples[-1], "rss_kib") / 1024, 1),
        "rss_growth_pct": round(growth("rss_kib"), 2),
        # Counts in the tens: growth as a count, since 5 % is under one.
        "threads": _sample_value(samples[-1], "threads"),
        "threads_added": added("threads"),
        "goroutines": None if samples[-1]["metrics"] is None else _sample_value(samples[-1], "goroutines"),
        "goroutines_added": None if samples[-1]["metrics"] is None else added("goroutines"),
    }


def _sample_value(sample: Figures, key: str) -> float:
    if key == "goroutines":
        return sample["metrics"]["goroutines"]
    return sample[key]


def _median(values: List[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


# -- disconnects ---------------------------------------------------------------


def disconnects(server: ServerProcess, scale: Scale) -> Figures:
    """scale.disconnects clients that vanish mid-call, a batch at a time: by
    RST_STREAM or by closing the TCP connection, during a unary call (its
    handler waits for the cancel, with a callback registered), a
    server-streaming one (reading nothing) or, where the server has it,
    a bidi one. A first round as large warms the server up (thread pools,
    buffer pools), so that RSS growth measures what each round leaves
    behind.

    RSS growth is the smallest of three measured rounds: a round's RSS
    swings by 10 % and more around its level (when the Go heap last grew
    and what the scavenger has returned yet; measured here: 56-66 MiB
    across rounds of the low-level server with no trend), while a leak
    raises every later round, so the smallest still shows it."""
    _vanish(server, scale.disconnects, random.Random(0))
    baseline = settled_stats(server)
    rss_after = []
    for seed in (1, 2, 3):
        _vanish(server, scale.disconnects, random.Random(seed))
        after = settled_stats(server)
        rss_after.append(after["rss_kib"])
    live = server.live_call_seconds()
    figures: Figures = {
        "clients": scale.disconnects,
        "callbacks_registered": after["callbacks_registered"] - baseline["callbacks_registered"],
        "callbacks_missing": after["callbacks_registered"] - after["callbacks_fired"],
        "rss_growth_pct": round(growth_percent(baseline["rss_kib"], min(rss_after)), 2),
        "live_call_s": round(live, 3),
        "leaked_calls": None,
    }
    if after["metrics"] is not None:
        figures["leaked_calls"] = after["metrics"]["calls_active"] - 1  # the Stats call itself
    return figures


def _vanish(server: ServerProcess, clients: int, rng: random.Random, batch: int = 40) -> None:
    modes = ["unary", "stream"] + (["bidi"] if server.kind != "lowlevel" else [])
    started = 0
    while started < clients:
        conns = []
        for _ in range(min(batch, clients - started)):
            conn = RawH2(server.port)
            mode = rng.choice(modes)
            if mode == "unary":
                conn.unary(1, SAY, b"block/cb" if server.kind != "lowlevel" else b"sleep:50")
            elif mode == "stream":
                conn.unary(1, COUNT, b"100000:1000")
            else:
                conn.headers(1, request_headers(BIDI))
                conn.data(1, grpc_message(b"hello"), end_stream=False)
            conns.append(conn)
            started += 1
        time.sleep(0.05)  # the calls reach their handlers
        for i, conn in enumerate(conns):
            if i % 2:
                conn.reset(1)
            conn.close()


# -- hostile clients -------------------------------------------------------------


def idle_connections(server: ServerProcess, scale: Scale, live_calls: int = 50) -> Figures:
    """scale.idle_connections connections that send half a preface and
    nothing more, then live calls on a new connection: p99 of those."""
    _raise_fd_limit(scale.idle_connections + 256)
    socks = []
    try:
        for _ in range(scale.idle_connections):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            s.sendall(b"PRI * HTTP/2.0\r\n")
            socks.append(s)
        times = []
        with server.channel() as ch:
            say = ch.unary_unary(SAY)
            for _ in range(live_calls):
                t0 = time.monotonic()
                ok = say(b"live", timeout=30) == b"live"
                times.append(time.monotonic() - t0)
                assert ok
        return {"idle": len(socks), "live_p99_ms": round(percentile(times, 99) * 1000, 1)}
    finally:
        for s in socks:
            s.close()


def _raise_fd_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


def rapid_reset(server: ServerProcess, scale: Scale) -> Figures:
    """CVE-2023-44487: whole calls (HEADERS, then the request and
    END_STREAM) each reset at once, as fast as one connection can write
    them, to a method that sleeps 20 ms. A server that starts a handler
    for every reset call pays for all of them (the attack); one that
    notices the reset before its handler starts pays for few. How the
    server reacts (it may close the connection), how many handlers ran, the
    server's CPU time per reset call, and a live call afterwards."""
    before = settled_stats(server)
    sent = 0
    closed_by_server = False
    with RawH2(server.port) as conn:
        block = conn.header_block(request_headers(server.say_path))
        body = grpc_message(b"sleep:20")
        try:
            for first in range(0, scale.rapid_resets, 100):
                frames = []
                for i in range(first, min(first + 100, scale.rapid_resets)):
                    stream_id = 2 * i + 1
                    frames += [HeadersFrame(stream_id, block, flags=["END_HEADERS"]),
                               DataFrame(stream_id, body, flags=["END_STREAM"]), RstStreamFrame(stream_id, 0x8)]
                conn.send(*frames)
                sent += len(frames) // 3
        except (BrokenPipeError, ConnectionResetError):
            closed_by_server = True
        closed_by_server = closed_by_server or _server_closes(conn)
    after = settled_stats(server)
    live = server.live_call_seconds()
    handlers = None if "handlers" not in after else after["handlers"] - before["handlers"]
    return {
        "streams_reset": sent,
        "server_closed_connection": closed_by_server,
        "handlers_run": handlers,
        "handlers_run_pct": None if handlers is None else round(100 * handlers / max(sent, 1), 1),
        "cpu_us_per_reset": round(1e6 * (after["cpu_s"] - before["cpu_s"]) / max(sent, 1)),
        "live_call_s": round(live, 3),
    }


def _server_closes(conn: RawH2, timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            frame = conn.receive(deadline - time.monotonic())
        except (Closed, ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        if frame.kind == "goaway":
            return True
    return False


# What the endless header blocks of continuation_flood are made of: NULs
# (each is HPACK for a field with an empty name, which a decoding server
# refuses at once; one that buffers the block until END_HEADERS keeps
# them), or well-formed fields ("x-pad: " and 100 bytes, never indexed),
# which a server must stop decoding and keeping at its header list limit.
FILLERS = ("NULs", "fields")


def continuation_flood(server: ServerProcess, filler: str = "NULs", limit_mib: int = 64) -> Figures:
    """A header block that never ends: HEADERS without END_HEADERS, then
    CONTINUATION frames of about 16 KiB of filler (FILLERS) until the
    server closes the connection or limit_mib were sent. The client's send
    buffer is kept small, so that what was sent is close to what the
    server read. Bytes sent before the close (a send that stalls for 10 s
    counts as the server no longer reading: not a close), and the growth
    of the server's peak RSS."""
    before = settled_stats(server)
    sent = 0
    closed = False
    if filler == "NULs":
        chunk = b"\x00" * 16384
    else:
        field = b"\x10\x05x-pad\x64" + b"p" * 100  # literal, never indexed, no Huffman
        chunk = field * (16384 // len(field))
    with RawH2(server.port) as conn:
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
        head = conn.header_block(request_headers(server.say_path))
        try:
            conn.send(HeadersFrame(1, head))
            while sent < limit_mib << 20:
                conn.send(ContinuationFrame(1, chunk))
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            closed = True
        except socket.timeout:
            pass  # the server stopped reading but kept the connection
        closed = closed or _server_closes(conn)
    after = server.stats()
    return {
        "sent_kib": sent // 1024,
        "server_closed_connection": closed,
        "rss_peak_growth_kib": after["rss_peak_kib"] - before["rss_peak_kib"],
        "rss_growth_pct": round(growth_percent(before["rss_kib"], after["rss_kib"]), 2),
        "live_call_s": round(server.live_call_seconds(), 3),
    }


def stalled_streams(server: ServerProcess, scale: Scale) -> Figures:
    """Streams whose responses are never read: each asks for 100 MB and
    grants no flow-control window beyond the default. Server memory per
    stalled stream, the CPU the server spends while they stay stalled (a
    sender told of room that isn't there retries in a loop), and a live
    call meanwhile."""
    before = settled_stats(server)
    with RawH2(server.port, auto_ack=False) as conn:
        for i in range(scale.stalled_streams):
            conn.unary(2 * i + 1, COUNT, b"100000:1000")
        time.sleep(1.0)  # the handlers write until flow control stops them
        stalled, t0 = server.stats(), time.monotonic()
        time.sleep(1.0)
        during, t1 = server.stats(), time.monotonic()
        live = server.live_call_seconds()
    after = settled_stats(server)
    grown_kib = max(0, during["rss_kib"] - before["rss_kib"])
    return {
        "streams": scale.stalled_streams,
        "rss_kib_per_stream": round(grown_kib / scale.stalled_streams, 1),
        "cpu_ms_per_s_stalled": round((during["cpu_s"] - stalled["cpu_s"]) * 1000 / (t1 - t0), 1),
        "live_call_s": round(live, 3),
        "leaked_calls": None if after["metrics"] is None else after["metrics"]["calls_active"] - 1,
    }


def wide_stalled_streams(server: ServerProcess, scale: Scale) -> Figures:
    """Streams asking for 100 MB each on one connection whose client
    grants the largest HTTP/2 windows (2^31-1, stream and connection), then
    never reads: what the server buffers for it is then up to the server
    (the h2 transport grew without bound, 4 GiB in 12 s, and could freeze
    the process). Growth of the server's RSS, and a live call meanwhile."""
    before = settled_stats(server)
    with RawH2(server.port, preface=False, auto_ack=False) as conn:
        conn.send_bytes(PREFACE + SettingsFrame(0, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 2**31 - 1}).serialize())
        conn.send(WindowUpdateFrame(0, 2**31 - 1 - 65535))
        for i in range(3):
            conn.unary(2 * i + 1, COUNT, b"100000:1000")
        time.sleep(2.0)  # the handlers write until the server holds them back
        during = server.stats()
        live = server.live_call_seconds()
    return {
        "streams": 3,
        "rss_growth_mib": round(max(0, during["rss_kib"] - before["rss_kib"]) / 1024, 1),
        "live_call_s": round(live, 3),
    }


def ping_flood(server: ServerProcess, scale: Scale) -> Figures:
    """A client that sends PINGs as fast as it can for 3 s and never reads
    their acks (its receive buffer shrunk to 4 KiB): what the server queues
    for it is up to the server (the h2 transport held up to 32 MiB of acks
    per connection; grpc-go's transport stops reading at 50 queued).
    Growth of the server's RSS, and a live call meanwhile."""
    before = settled_stats(server)
    pings = PingFrame(0, b"12345678").serialize() * 1000
    sent, blocked = 0, False
    with RawH2(server.port, timeout=1.0) as conn:
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            try:
                conn.send_bytes(pings)
            except OSError:  # a timeout: the server stopped reading
                blocked = True
                break
            sent += 1000
        time.sleep(0.2)  # the server acts on what it read
        during = server.stats()
        live = server.live_call_seconds()
    return {
        "pings_sent": sent,
        "server_stopped_reading": blocked,
        "rss_growth_mib": round(max(0, during["rss_kib"] - before["rss_kib"]) / 1024, 1),
        "live_call_s": round(live, 3),
    }


# -- limits and counters ---------------------------------------------------------


def max_concurrent_rpcs(server: ServerProcess, limit: int, calls: int) -> Figures:
    """`calls` unary calls at once (one connection each, so that no
    connection-level limit queues them) to a method that sleeps 500 ms, on
    a server started with maximum_concurrent_rpcs=limit: the status
    counts. Then as many again after the first have ended: the places are
    free again."""

    def burst() -> Dict[str, int]:
        channels = [server.channel() for _ in range(calls)]
        try:
            for ch in channels:
                grpc.channel_ready_future(ch).result(timeout=30)
            futures = [ch.unary_unary(SAY).future(b"sleep:500", timeout=30) for ch in channels]
            out: Dict[str, int] = {}
            for fut in futures:
                try:
                    fut.result()
                    code = "OK"
                except grpc.RpcError as err:
                    code = err.code().name
                out[code] = out.get(code, 0) + 1
            return dict(sorted(out.items()))
        finally:
            for ch in channels:
                ch.close()

    return {"limit": limit, "calls": calls, "first burst": burst(), "second burst": burst()}


def call_storm(server: ServerProcess, scale: Scale) -> Figures:
    """Calls that end every way at once, for the metrics invariant:
    completed (echoes, handler errors), cancelled (clients vanishing,
    rapid reset), deadline exceeded (handlers that outlive a short
    deadline), refused (an unknown method). Then the front's counters."""
    _vanish(server, scale.disconnects // 4, random.Random(2))
    rapid_reset(server, scale)
    slow = b"sleep:400" if server.kind == "lowlevel" else b"block"
    with server.channel() as ch:
        say = ch.unary_unary(SAY)
        # The short deadlines go first, onto an idle server: a deadline is
        # the server's only when its own clock (started at the call's
        # headers) ends the call before the client's reset arrives, which
        # a server still busy with the others when the headers come can
        # miss, as grpcio's would.
        futures = [say.future(slow, timeout=0.3) for _ in range(20)]
        futures += [say.future(b"echo", timeout=10) for _ in range(50)]
        futures += [say.future(b"raise", timeout=10) for _ in range(10)]
        futures += [ch.unary_unary("/rel.R/Nope").future(b"", timeout=10) for _ in range(10)]
        codes: Dict[str, int] = {}
        for fut in futures:
            try:
                fut.result()
                code = "OK"
            except grpc.RpcError as err:
                code = err.code().name
            codes[code] = codes.get(code, 0) + 1
    return {"client outcomes": dict(sorted(codes.items()))}


# -- bad input -------------------------------------------------------------------


def _outcome(conn: RawH2, stream_id: int = 1, timeout: float = 3.0) -> str:
    """What the server answered a stream: ``status N``, ``rst N`` (RST_STREAM
    code), ``goaway N`` or ``closed``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            f = conn.receive(deadline - time.monotonic())
        except (Closed, ConnectionResetError, BrokenPipeError):
            return "closed"  # BrokenPipeError: acknowledging its SETTINGS or PING
        except socket.timeout:
            break
        if f.kind == "headers" and f.stream_id == stream_id:
            if f.end_stream or "grpc-status" in f.headers:
                return f"status {f.headers.get('grpc-status', '-')}" + (
                    f" (http {f.headers[':status']})" if f.headers.get(":status", "200") != "200" else ""
                )
        elif f.kind == "rst" and f.stream_id == stream_id:
            return f"rst {f.error_code}"
        elif f.kind == "goaway":
            return f"goaway {f.error_code}"
    return "no answer"


def _raw_case(port: int, send: Any) -> str:
    with RawH2(port) as conn:
        try:
            send(conn)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed mid-case: _outcome says how
        return _outcome(conn)


def _without(name: str) -> Any:
    def send(c: RawH2, say: str) -> None:
        c.headers(1, [h for h in request_headers(say) if h[0] != name])
        c.data(1, grpc_message(b"x"))

    return send


# Each case sends to the server's unary echo method, whose path is `say`.
RAW_CASES: Dict[str, Any] = {
    "random bytes instead of a preface": lambda c, say: c.send_bytes(random.Random(3).randbytes(4096)),
    "bad :path (no method part)": lambda c, say: c.unary(1, say.rsplit("/", 1)[0], b"x"),
    "bad :path (not absolute)": lambda c, say: c.unary(1, say[1:], b"x"),
    "missing te": _without("te"),
    "missing content-type": _without("content-type"),
    "malformed grpc-timeout": lambda c, say: c.unary(1, say, b"x", timeout="soon"),
    "compressed flag without grpc-encoding": lambda c, say: (
        c.headers(1, request_headers(say)),
        c.data(1, grpc_message(b"x", compressed=True)),
    ),
    "length prefix longer than the body": lambda c, say: (
        c.headers(1, request_headers(say)),
        c.data(1, grpc_message(b"x", declared_length=1000)),
    ),
    "DATA on a stream never opened": lambda c, say: c.data(1, grpc_message(b"x")),
    # Frames HTTP/2 forbids (RFC 9113 sections 5.1, 6.x): grpc-go's answer
    # is the reference, whatever the RFC would prefer.
    "HEADERS on stream 0": lambda c, say: c.send_bytes(_frame(0x1, 0x4, 0, c.header_block(request_headers(say)))),
    "HEADERS on an even stream": lambda c, say: c.send_bytes(_frame(0x1, 0x4, 2, c.header_block(request_headers(say)))),
    "stream ids going backwards": lambda c, say: (c.unary(3, say, b"x"), time.sleep(0.05), c.unary(1, say, b"y")),
    "DATA on stream 0": lambda c, say: c.send_bytes(_frame(0x0, 0x0, 0, grpc_message(b"x"))),
    "DATA over the max frame size": lambda c, say: (
        c.headers(1, request_headers(say)),
        c.send_bytes(_frame(0x0, 0x1, 1, bytes(16385))),
    ),
    "a frame of unknown type, then a call": lambda c, say: (c.send_bytes(_frame(0xFA, 0, 1, b"?")), c.unary(1, say, b"x")),
    "PRIORITY depending on itself": lambda c, say: c.send_bytes(_frame(0x2, 0, 1, struct.pack(">IB", 1, 16))),
    "RST_STREAM on an idle stream": lambda c, say: c.send_bytes(_frame(0x3, 0, 1, struct.pack(">I", 8))),
    "HEADERS interrupted by a PING": lambda c, say: (
        c.send_bytes(_frame(0x1, 0x0, 1, c.header_block(request_headers(say)))),
        c.send_bytes(_frame(0x6, 0, 0, bytes(8))),
    ),
    "CONTINUATION without HEADERS": lambda c, say: c.send_bytes(_frame(0x9, 0x4, 1, c.header_block(request_headers(say)))),
    "undecodable HPACK": lambda c, say: c.send_bytes(_frame(0x1, 0x5, 1, b"\xff" * 5)),
    "uppercase header name": lambda c, say: (
        c.headers(1, request_headers(say, extra=[("X-Upper", "v")])),
        c.data(1, grpc_message(b"x")),
    ),
    "WINDOW_UPDATE of 0 on the connection": lambda c, say: c.send_bytes(_frame(0x8, 0, 0, struct.pack(">I", 0))),
    "connection window past 2^31-1": lambda c, say: c.send_bytes(_frame(0x8, 0, 0, struct.pack(">I", 2**31 - 1)) * 2),
    "INITIAL_WINDOW_SIZE past 2^31-1": lambda c, say: c.send_bytes(_frame(0x4, 0, 0, struct.pack(">HI", 4, 2**31))),
    "SETTINGS ACK with a payload": lambda c, say: c.send_bytes(_frame(0x4, 0x1, 0, struct.pack(">HI", 3, 1))),
    "PING on a stream": lambda c, say: c.send_bytes(_frame(0x6, 0, 1, bytes(8))),
}


def _frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    """One HTTP/2 frame as raw bytes, whatever it says (hyperframe refuses
    to build the forbidden ones)."""
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", kind, flags, stream_id) + payload


def raw_frames(server: ServerProcess) -> Figures:
    """Each RAW_CASES case on a connection of its own: the server's answer,
    then whether it still serves."""
    outcomes = {name: _raw_case(server.port, lambda c: send(c, server.say_path)) for name, send in RAW_CASES.items()}
    return {"outcomes": outcomes, "alive": server.alive(), "live_call_s": round(server.live_call_seconds(), 3)}


def over_limits(server: ServerProcess) -> Figures:
    """A 5 MiB request (limit 4 MiB) and 20 KiB of request metadata (limit
    8 KiB soft, 16 KiB hard), from a grpcio client: the statuses."""
    out: Figures = {}
    with server.channel() as ch:
        say = ch.unary_unary(SAY)
        for name, call in {
            "message over 4 MiB": lambda: say(b"m" * (5 << 20), timeout=30),
            "metadata over 16 KiB": lambda: say(b"x", metadata=[("x-big", "v" * (20 << 10))], timeout=30),
        }.items():
            try:
                call()
                out[name] = "OK"
            except grpc.RpcError as err:
                out[name] = err.code().name
    out["live_call_s"] = round(server.live_call_seconds(), 3)
    return out


# -- faults --------------------------------------------------------------------


def handler_faults(server: ServerProcess) -> Figures:
    """Handlers that raise, return the wrong type, raise mid-stream or
    block until the deadline: the status each call ends with."""
    out: Figures = {}
    with server.channel() as ch:
        say = ch.unary_unary(SAY)
        cases = {
            "raises": lambda: say(b"raise", timeout=10),
            # grpc.server() never answers this one: a short deadline.
            "returns the wrong type": lambda: say(b"wrongtype", timeout=2),
            "blocks past the deadline": lambda: say(b"block", timeout=0.5),
            "raises mid-stream": lambda: list(ch.unary_stream(COUNT)(b"raise", timeout=10)),
        }
        for name, call in cases.items():
            try:
                call()
                out[name] = "OK"
            except grpc.RpcError as err:
                out[name] = err.code().name
    out["alive"] = server.alive()
    return out


def stop_under_load(server: ServerProcess, clients: int = 8) -> Figures:
    """Stops the server (grace 1 s) while clients call slow methods: how
    long the stop took, its exit code, and that every call got an answer
    (no client waits past its deadline)."""
    stop = threading.Event()
    outcomes: Dict[str, int] = {}
    lock = threading.Lock()

    def client() -> None:
        with server.channel() as ch:
            say = ch.unary_unary(SAY)
            while not stop.is_set():
                try:
                    say(b"sleep:50", timeout=20)
                    code = "OK"
                except grpc.RpcError as err:
                    code = err.code().name
                with lock:
                    outcomes[code] = outcomes.get(code, 0) + 1

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    t0 = time.monotonic()
    rc: Optional[int] = server.stop(timeout=30)
    took = time.monotonic() - t0
    stop.set()
    for t in threads:
        t.join(25)
    return {
        "stop_s": round(took, 2),
        "exit_code": rc,
        "client_outcomes": dict(sorted(outcomes.items())),
        "clients_stuck": sum(t.is_alive() for t in threads),
    }


def cancelled_while_queued(server: ServerProcess, calls: int = 400, burst: int = 50) -> Figures:
    """Calls sent in bursts (more than the workers can take) and reset 5 ms
    later, against handlers that sleep 20 ms: how many handlers still ran,
    and how long a live call then waits (issue 19 bug 1)."""
    before = settled_stats(server)
    with RawH2(server.port) as conn:
        for first in range(0, calls, burst):
            ids = [2 * i + 1 for i in range(first, min(first + burst, calls))]
            for stream_id in ids:
                conn.unary(stream_id, SAY, b"sleep:20")
            time.sleep(0.005)
            for stream_id in ids:
                conn.reset(stream_id)
    live = server.live_call_seconds()
    after = settled_stats(server)
    return {"calls": calls, "handlers_run": after["handlers"] - before["handlers"], "live_call_s": round(live, 3)}


# -- TLS -----------------------------------------------------------------------


def write_tls_files(pki: Any, directory: Path) -> Path:
    """The files serve.py reads for mutual TLS (PGN_REL_TLS_DIR)."""
    for name, data in (("server.key", pki.server.key), ("server.pem", pki.server.chain), ("ca.pem", pki.ca.cert)):
        (directory / name).write_bytes(data)
    return directory


def tls_garbage(server: ServerProcess, pki: Any) -> Figures:
    """Against a mutual-TLS port: a plaintext HTTP/2 client, a ClientHello
    of random bytes, a client certificate from an untrusted CA, no client
    certificate; then a good client. How each connection ends."""

    def raw(data: bytes) -> str:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(data)
            try:
                got = s.recv(4096)
            except (ConnectionResetError, socket.timeout) as err:
                return type(err).__name__
            if not got:
                return "closed"
            return "TLS alert" if got[:1] == b"\x15" else f"{len(got)} bytes"

    def call(client: Optional[Any]) -> str:
        creds = grpc.ssl_channel_credentials(
            pki.ca.cert, client.key if client else None, client.chain if client else None
        )
        with grpc.secure_channel(server.target, creds, options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
            try:
                ch.unary_unary(SAY)(b"tls", timeout=10)
                return "OK"
            except grpc.RpcError as err:
                return err.code().name

    garbage = random.Random(5).randbytes(200)
    return {
        "plaintext HTTP/2": raw(PREFACE),
        "random ClientHello": raw(b"\x16\x03\x01\x00\xc8" + garbage),
        "untrusted client certificate": call(pki.other_client),
        "no client certificate": call(None),
        "trusted client": call(pki.client),
        "alive": server.alive(),
    }
