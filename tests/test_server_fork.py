"""Servers in forked children, as grpcio serves them (its multiprocessing
example, and grpcio's own _jina_hanging_test): a parent that imported grpc
and the server package, and made no server, forks workers that each make,
start and serve one; several may share a port (SO_REUSEPORT, which grpcio
sets unless told not to).

``import pygrpc_native`` must not start the Go runtime (which does not
survive fork()): it starts when the first server or front is made. Once it
has started, a forked child gets a RuntimeError saying so rather than a
hang (test_lowlevel_fork.py, and the last test here).

Each scenario runs in a fresh interpreter (this pytest process has loaded
the core long ago), once with grpcio's servers and once with ours, and the
outcomes are compared.
"""

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(180)

SCRIPT = textwrap.dedent(
    r'''
    import asyncio
    import json
    import multiprocessing
    import os
    import socket
    import subprocess
    import sys
    from concurrent import futures

    import grpc
    import grpc.aio
    import pygrpc_native
    import pygrpc_native.aio

    KIND, SCENARIO = sys.argv[1], sys.argv[2]
    WORKERS = 3


    def say(request, context):
        return request + b" from " + str(os.getpid()).encode()


    def chat(requests, context):
        for request in requests:
            yield request


    def handlers():
        return grpc.method_handlers_generic_handler(
            "fork.Test",
            {
                "Say": grpc.unary_unary_rpc_method_handler(say),
                "Chat": grpc.stream_stream_rpc_method_handler(chat),
            },
        )


    def sync_worker(port, ready):
        make = grpc.server if KIND == "grpcio" else pygrpc_native.server
        # No options: grpcio sets SO_REUSEPORT by default, so the workers
        # share the port.
        server = make(futures.ThreadPoolExecutor(max_workers=4), (handlers(),))
        bound = server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        ready.put(bound)
        server.wait_for_termination()


    def aio_worker(port, ready):
        async def serve():
            make = grpc.aio.server if KIND == "grpcio" else pygrpc_native.aio.server
            server = make(handlers=(handlers(),))
            bound = server.add_insecure_port(f"127.0.0.1:{port}")
            await server.start()
            ready.put(bound)
            await server.wait_for_termination()

        asyncio.run(serve())


    # The calls are made by a client in a process of its own: grpcio's
    # channels in a parent that then forks are grpcio's own fork problem,
    # not the servers'.
    CLIENT = """
    import json, sys
    import grpc
    port, connections = int(sys.argv[1]), int(sys.argv[2])
    replies, echoes = [], []
    for _ in range(connections):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            replies.append(channel.unary_unary("/fork.Test/Say")(b"hi", timeout=10).decode())
            if connections == 1:
                chat = channel.stream_stream("/fork.Test/Chat")
                echoes = [echo.decode() for echo in chat(iter([b"a", b"b", b"c"]), timeout=10)]
    print(json.dumps([replies, echoes]))
    """


    def client(port, connections=1):
        """What the servers on port answered: the Say replies, one call per
        connection, and (for one connection) the Chat echoes."""
        out = subprocess.run(
            [sys.executable, "-c", CLIENT, str(port), str(connections)], capture_output=True, text=True, timeout=60
        )
        if out.returncode:
            raise RuntimeError(out.stderr)
        return json.loads(out.stdout)


    def reserve_port():
        """The port the workers share, held open by the parent with
        SO_REUSEPORT so that nothing else takes it meanwhile."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", 0))
        return sock


    def main():
        context = multiprocessing.get_context("fork")
        report = {}
        if SCENARIO == "shared-port":
            held = reserve_port()
            port = held.getsockname()[1]
            ready = context.Queue()
            workers = [context.Process(target=sync_worker, args=(port, ready)) for _ in range(WORKERS)]
            for worker in workers:
                worker.start()
            report["bound"] = sorted({ready.get(timeout=60) == port for _ in workers})
            # Each call on a new connection: the kernel spreads connections
            # over the workers listening on the port.
            replies, _ = client(port, 100)
            answered = {int(reply.split()[-1]) for reply in replies if reply.startswith("hi from ")}
            report["workers_answering"] = len(answered & {worker.pid for worker in workers})
            held.close()
        else:
            target = sync_worker if SCENARIO == "sync" else aio_worker
            report["rounds"] = []
            for _ in range(3):  # grpcio's _jina_hanging_test: serve, stop, again
                ready = context.Queue()
                workers = [context.Process(target=target, args=(0, ready))]
                workers[0].start()
                port = ready.get(timeout=60)
                replies, echoes = client(port)
                report["rounds"].append([replies == ["hi from %d" % workers[0].pid], echoes])
                workers[0].terminate()
                workers[0].join(30)
        for worker in workers:
            worker.terminate()
            worker.join(30)
        report["exit_codes"] = [w.exitcode for w in workers]
        # The parent serves too once its children are gone.
        make = grpc.server if KIND == "grpcio" else pygrpc_native.server
        server = make(futures.ThreadPoolExecutor(max_workers=2), (handlers(),))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            report["parent"] = channel.unary_unary("/fork.Test/Say")(b"hi", timeout=10) == b"hi from %d" % os.getpid()
        server.stop(None)
        print("REPORT " + json.dumps(report), flush=True)


    main()
    '''
)


def run(tmp_path, kind, scenario):
    script = tmp_path / "fork_serve.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), kind, scenario], capture_output=True, text=True, timeout=150
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, f"{kind} {scenario} failed (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1][len("REPORT ") :])


@pytest.mark.parametrize("scenario", ["sync", "aio", "shared-port"])
def test_children_forked_after_import_serve(tmp_path, scenario):
    ours = run(tmp_path, "ours", scenario)
    grpcio = run(tmp_path, "grpcio", scenario)
    assert ours == grpcio
    if scenario == "shared-port":
        assert ours["bound"] == [True] and ours["workers_answering"] == 3
    else:
        assert ours["rounds"] == [[True, ["a", "b", "c"]]] * 3
    assert set(ours["exit_codes"]) == {-15} and ours["parent"] is True


CHILD_AFTER_SERVER = textwrap.dedent(
    r'''
    import multiprocessing
    from concurrent import futures

    import pygrpc_native

    server = pygrpc_native.server(futures.ThreadPoolExecutor(max_workers=1))


    def child(queue):
        try:
            pygrpc_native.server(futures.ThreadPoolExecutor(max_workers=1))
            queue.put("made a server")
        except RuntimeError as err:
            queue.put(f"RuntimeError: {err}")


    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    print("CHILD " + queue.get(timeout=60), flush=True)
    process.join(30)
    server.stop(None)
    '''
)


def test_child_forked_after_a_server_was_made_gets_a_clear_error(tmp_path):
    script = tmp_path / "fork_after_server.py"
    script.write_text(CHILD_AFTER_SERVER)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("CHILD ")]
    assert lines, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert lines[0].startswith("CHILD RuntimeError: pygrpc_native cannot be used in a process forked after")
    assert "Go runtime" in lines[0]
