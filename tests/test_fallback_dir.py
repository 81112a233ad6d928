"""The fallback's private socket directory (pygrpc_native/_fallback_dir.py):
private (0700), removed only by the process that made it, and reclaimed
from servers that died without stop() (issue 19, bugs 2 and 4).

Servers run in fresh interpreters whose TMPDIR is the test's own directory,
so each test sees exactly the directories its servers made.
"""

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(90)

_SERVE = textwrap.dedent(
    r"""
    import os, sys, time
    from concurrent import futures
    import grpc
    import pygrpc_native

    def bidi(requests, context):
        for message in requests:
            yield message

    def make_server():
        server = pygrpc_native.server(futures.ThreadPoolExecutor(4))
        handler = grpc.method_handlers_generic_handler(
            "t.T", {"Bidi": grpc.stream_stream_rpc_method_handler(bidi)}
        )
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        return server, port

    def call_bidi(port):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            return list(ch.stream_stream("/t.T/Bidi")(iter([b"a", b"b"]), timeout=10))
    """
)


def _run(tmp_path, body: str, *args: str, wait: bool = True):
    script = tmp_path / "script.py"
    script.write_text(_SERVE + textwrap.dedent(body))
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    cmd = [sys.executable, str(script), *args]
    if not wait:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"script failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _fallback_dirs(tmp_path):
    return sorted(p for p in os.listdir(tmp_path / "tmp") if p.startswith("pygrpc-native-"))


def test_forked_child_exiting_normally_keeps_parents_socket(tmp_path):
    """The child's exit (atexit finalizers included) must not remove the
    parent's fallback directory: fallback calls keep working after it."""
    out = _run(
        tmp_path,
        """
        server, port = make_server()
        assert call_bidi(port) == [b"a", b"b"]
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # a normal exit: atexit handlers run
        os.waitpid(pid, 0)
        sock = [os.path.join(r, f) for r, _, fs in os.walk(os.environ["TMPDIR"]) for f in fs if f == "fallback.sock"]
        print("SOCKETS", len(sock))
        print("AFTER", call_bidi(port) == [b"a", b"b"])
        server.stop(None)
        """,
    )
    assert "SOCKETS 1" in out, out
    assert "AFTER True" in out, out
    assert _fallback_dirs(tmp_path) == [], "stop() in the parent removes its directory"


def test_directory_is_private(tmp_path):
    out = _run(
        tmp_path,
        """
        server, port = make_server()
        d = [e for e in os.listdir(os.environ["TMPDIR"]) if e.startswith("pygrpc-native-")][0]
        print("MODE", oct(os.stat(os.path.join(os.environ["TMPDIR"], d)).st_mode & 0o777))
        server.stop(None)
        """,
    )
    assert "MODE 0o700" in out, out


def _start_and_wait(tmp_path):
    """A server in its own process, serving until killed; returns it."""
    proc = _run(tmp_path, 'server, port = make_server()\nprint("READY", flush=True)\ntime.sleep(300)\n', wait=False)
    assert proc.stdout.readline().strip() == "READY"
    return proc


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_killed_servers_directories_are_reclaimed_by_the_next_start(tmp_path, how):
    """A server killed without stop() leaves its directory (nothing runs in
    a SIGKILLed process); the next server to start removes it, and leaves
    the directory of a server that still runs, and a directory it doesn't
    recognise, alone."""
    alive = _start_and_wait(tmp_path)
    try:
        alive_dirs = _fallback_dirs(tmp_path)
        killed = _start_and_wait(tmp_path)
        killed_dirs = sorted(set(_fallback_dirs(tmp_path)) - set(alive_dirs))
        killed.send_signal(how)
        killed.wait(30)
        foreign = tmp_path / "tmp" / "pygrpc-native-foreign"
        foreign.mkdir()
        assert len(alive_dirs) == 1 and len(killed_dirs) == 1
        assert set(_fallback_dirs(tmp_path)) == {*alive_dirs, *killed_dirs, foreign.name}
        out = _run(
            tmp_path,
            """
            server, port = make_server()
            print("CALL", call_bidi(port) == [b"a", b"b"])
            import json
            print("DIRS", json.dumps([e for e in os.listdir(os.environ["TMPDIR"]) if e.startswith("pygrpc-native-")]))
            server.stop(None)
            """,
        )
        assert "CALL True" in out, out
        during = json.loads(out.split("DIRS ", 1)[1].strip())
        assert not set(killed_dirs) & set(during), f"the killed server's directory was not reclaimed: {during}"
        assert set(alive_dirs) <= set(during), "a live server's directory was removed"
        assert stat.S_ISDIR(os.stat(foreign).st_mode)
    finally:
        alive.kill()
        alive.wait(30)


def test_a_temporary_directory_too_deep_for_a_socket_falls_back_to_tmp(tmp_path):
    """A TMPDIR whose path leaves no room for the socket name still gives a
    working server: the fallback directory goes to /tmp instead."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    script = tmp_path / "deep.py"
    script.write_text(
        "import grpc, pygrpc_native\n"
        "from concurrent import futures\n"
        "server = pygrpc_native.server(futures.ThreadPoolExecutor(2))\n"
        "server.add_insecure_port('127.0.0.1:0')\n"
        "server.start()\n"
        "print(server._fallback_dir.path)\n"
        "server.stop(None)\n"
    )
    env = dict(os.environ, TMPDIR=str(deep))
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith("/tmp/pygrpc-native-"), proc.stdout
