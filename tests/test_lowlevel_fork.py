"""A Go runtime does not survive fork(): in a child forked after the core loaded,
every use of NativeGrpcFront must raise RuntimeError (not hang or crash),
and the parent must keep serving.

Each scenario runs in a fresh interpreter so that a hang or crash in the
child can't take the test session with it, and so that the pytest process's
own threads don't muddle the fork.
"""

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(120)

SCRIPT = textwrap.dedent(
    r'''
    import json
    import multiprocessing as mp
    import sys
    import threading

    import grpc
    from pygrpc_native import EVENT_CALL, NativeGrpcFront

    SCENARIO = sys.argv[1]
    METHODS = [("/echo.Echo/Say", False)]


    def serve(front):
        while True:
            events = front.recv_batch(16, 0.5)
            if events is None:
                return
            for kind, call_id, _, payload, _ in events:
                if kind == EVENT_CALL:
                    front.respond(call_id, payload)


    def call(port, payload):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            return ch.unary_unary("/echo.Echo/Say")(payload, timeout=10)


    def child(front, conn):
        probes = [("new_front", lambda: NativeGrpcFront("127.0.0.1:0", METHODS))]
        if front is not None:
            probes += [
                ("metrics", lambda: front.metrics()),
                ("recv_batch", lambda: front.recv_batch(1, 0.1)),
                ("respond", lambda: front.respond(1, b"x")),
                ("send_message", lambda: front.send_message(1, b"x")),
                ("send_initial_metadata", lambda: front.send_initial_metadata(1, [("k", "v")])),
                ("finish", lambda: front.finish(1, 0)),
                ("cancel", lambda: front.cancel(1)),
                ("is_active", lambda: front.is_active(1)),
                ("time_remaining", lambda: front.time_remaining(1)),
                ("call_details", lambda: front.call_details(1)),
                ("start", lambda: front.start()),
                ("stop", lambda: front.stop()),
            ]
        for name, probe in probes:
            conn.send(("probing", name, None))
            try:
                probe()
                outcome = "returned without error"
            except RuntimeError:
                outcome = "RuntimeError"
            except BaseException as exc:
                outcome = f"{type(exc).__name__}: {exc}"
            conn.send(("result", name, outcome))
        conn.send(("done", None, None))
        conn.close()


    def main():
        front = None
        thread = None
        if SCENARIO in ("created", "started"):
            front = NativeGrpcFront("127.0.0.1:0", METHODS)
        if SCENARIO == "started":
            front.start()
            thread = threading.Thread(target=serve, args=(front,), daemon=True)
            thread.start()
            assert call(front.port, b"before fork") == b"before fork"

        ctx = mp.get_context("fork")
        parent_end, child_end = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=child, args=(front, child_end))
        proc.start()
        child_end.close()
        report = {"results": {}, "last_probe": None, "done": False}
        while parent_end.poll(20):
            try:
                kind, name, outcome = parent_end.recv()
            except EOFError:
                break
            if kind == "probing":
                report["last_probe"] = name
            elif kind == "result":
                report["results"][name] = outcome
            else:
                report["done"] = True
                break
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
            report["child"] = "hung"
        else:
            report["child"] = proc.exitcode

        if SCENARIO == "started":
            report["after_fork"] = call(front.port, b"after fork").decode()
            front.stop()
            thread.join(10)
            report["parent_stopped"] = not thread.is_alive()
        print("REPORT " + json.dumps(report))


    main()
    '''
)


@pytest.mark.parametrize("scenario", ["front-imported", "created", "started"])
def test_child_process_gets_runtime_error(tmp_path, scenario):
    script = tmp_path / "fork_check.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), scenario],
        capture_output=True,
        text=True,
        timeout=90,
    )
    lines = [l for l in proc.stdout.splitlines() if l.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, f"script failed (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    report = json.loads(lines[-1][len("REPORT "):])
    assert report["done"], f"child stopped answering during probe {report['last_probe']!r}: {report}"
    assert report["child"] == 0, f"child ended with {report['child']}: {report}"
    wrong = {k: v for k, v in report["results"].items() if v != "RuntimeError"}
    assert not wrong, f"in the forked child these did not raise RuntimeError: {wrong}"
    if scenario == "started":
        assert report["after_fork"] == "after fork"
        assert report["parent_stopped"]
