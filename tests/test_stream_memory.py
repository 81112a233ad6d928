"""Memory a server spends on a request stream its handler doesn't read yet.

A client pushes 64 KiB messages for about 3 s, as fast as the server
lets it, at a client-streaming handler that sleeps 3 s before it reads
one. HTTP/2 flow control is what keeps such a client from filling the
server's memory: a server must stop granting window while the handler
doesn't read, rather than take every message in. The server runs in a
process of its own (stream_memory_server.py) and its resident memory
(/proc/<pid>/status VmRSS) is sampled before the call and while it runs;
ours may grow at most 8 MiB more than grpcio's server of the same kind
does in the same test.
"""

import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]

SERVER = Path(__file__).resolve().parent / "stream_memory_server.py"
PATH = "/mem.M/Collect"
MESSAGE = 64 * 1024
PUSH_SECONDS = 3.0
HANDLER_SLEEP = 3.0
MiB = 1024 * 1024
ALLOWED_EXTRA = 8 * MiB
MAX_PUSHED = 1024  # 64 MiB; grpcio's servers take in about 64 messages before the handler reads


def _rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _pushing(seconds, sent):
    """64 KiB messages for seconds (counting them into sent[0]), or until
    MAX_PUSHED of them went: a server that takes in everything has failed
    by then, and the test needn't fill the machine's memory to show it."""
    payload = os.urandom(MESSAGE)  # incompressible, not that it is compressed
    end = time.monotonic() + seconds
    while time.monotonic() < end and sent[0] < MAX_PUSHED:
        sent[0] += 1
        yield payload


def _measure(kind):
    """Runs the scenario against stream_memory_server.py KIND: (RSS growth
    in bytes, peak over the call, messages sent, the handler's answer)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, str(SERVER), kind], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("PORT "), f"{kind} server did not start (said {line!r})"
        target = f"127.0.0.1:{int(line.split()[1])}"
        with grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
            collect = channel.stream_unary(PATH)
            # Warm up: the server's threads, buffers and first call are paid for here.
            warm = [0]
            assert collect(_pushing(0.3, warm), timeout=10) == b"%d %d" % (warm[0], warm[0] * MESSAGE)
            time.sleep(0.2)
            before = _rss(proc.pid)
            peak = [before]
            done = threading.Event()

            def sample():
                while not done.wait(0.05):
                    try:
                        peak[0] = max(peak[0], _rss(proc.pid))
                    except (OSError, RuntimeError):
                        return

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            sent = [0]
            try:
                answer = collect(_pushing(PUSH_SECONDS, sent), metadata=(("x-sleep", str(HANDLER_SLEEP)),), timeout=30)
            finally:
                done.set()
                sampler.join(5)
            peak[0] = max(peak[0], _rss(proc.pid))
        return peak[0] - before, peak[0], sent[0], answer
    finally:
        try:
            proc.stdin.close()
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.mark.parametrize("kinds", [("grpc", "native"), ("grpc_aio", "native_aio")], ids=["sync", "aio"])
def test_unread_request_stream_memory(kinds):
    control, ours = kinds
    ref_growth, ref_peak, ref_sent, ref_answer = _measure(control)
    growth, peak, sent, answer = _measure(ours)
    summary = (
        f"\n  {control}: RSS +{ref_growth / MiB:.1f} MiB (peak {ref_peak / MiB:.1f} MiB), {ref_sent} messages sent"
        f"\n  {ours}: RSS +{growth / MiB:.1f} MiB (peak {peak / MiB:.1f} MiB), {sent} messages sent"
    )
    # Every message the client sent reached the handler, on both.
    assert ref_answer == b"%d %d" % (ref_sent, ref_sent * MESSAGE), summary
    assert answer == b"%d %d" % (sent, sent * MESSAGE), summary
    assert growth <= ref_growth + ALLOWED_EXTRA, summary
    print(summary)
