"""The benchmark harness runs: `python -m bench.compare --quick` on a few cells.

Only that it finishes, exits 0 and prints its table and targets; a benchmark
is not a test, so nothing here looks at the numbers. The paced client's
command line and issue 24's target checks are also tested on their own, with
made-up rows.
"""

import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LIMIT_S = 240


def _run(servers: str, clients: str, workloads: str) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [
            sys.executable, "-m", "bench.compare", "--quick", "--no-save",
            "--servers", servers, "--clients", clients, "--workloads", workloads,
        ],  # fmt: skip
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(LIMIT_S + 30)
def test_compare_quick_grpcio_client():
    out = _run("grpcio_sync,native_sync,lowlevel", "grpcio_1thread", "empty,stream100")
    assert "### Targets (issues 7, 14, 23 and 24)" in out
    assert "### Empty unary" in out and "### Server streaming" in out
    for name in ("| grpc.server() |", "| pygrpc_native.server() |", "| Low-level API (NativeGrpcFront) |"):
        assert name in out
    assert "FAILED" not in out


@pytest.mark.slow
@pytest.mark.timeout(LIMIT_S + 30)
@pytest.mark.skipif(shutil.which("go") is None, reason="the Go loadgen and ceiling need Go to build")
def test_compare_quick_loadgen_and_ceiling():
    out = _run("grpcio_aio,native_aio,ceiling", "loadgen", "empty")
    assert "| Go loadgen | Ceiling: the Go front answering in Go |" in out
    assert "| Go loadgen | pygrpc_native.aio.server() |" in out
    assert "FAILED" not in out


@pytest.mark.slow
@pytest.mark.timeout(LIMIT_S + 30)
def test_compare_quick_request_streams():
    """The client-streaming and bidi workloads against the grpcio-API servers."""
    out = _run("grpcio_sync,native_sync,grpcio_aio,native_aio", "grpcio_1thread", "client100,bidi100")
    assert "### Client streaming, 100 empty messages per call" in out
    assert "### Bidi streaming, 100 empty ping-pong echoes per call" in out
    assert "| 1 grpcio thread | pygrpc_native.aio.server() |" in out
    assert "CPU per stream at least 5x lower" in out
    assert "FAILED" not in out


@pytest.mark.slow
@pytest.mark.timeout(LIMIT_S + 30)
def test_compare_quick_tls():
    out = _run("grpcio_sync_tls,native_sync_tls", "grpcio_1thread", "empty")
    assert "### TLS: Empty unary" in out
    assert "| 1 grpcio thread | pygrpc_native.server() + TLS |" in out
    assert "FAILED" not in out


@pytest.mark.slow
@pytest.mark.timeout(LIMIT_S + 30)
@pytest.mark.skipif(shutil.which("go") is None, reason="the Go loadgen and ceiling need Go to build")
def test_compare_quick_paced_client():
    """The paced client runs the empty workload only, and its cells feed
    issue 24's paced target (ceiling_h2 alone builds the ceiling, too)."""
    out = _run("ceiling_h2,grpcgo", "loadgen_paced", "empty,stream100")
    assert "| Go loadgen, 4,000/s | Ceiling, h2 transport |" in out
    assert "### Server streaming" not in out
    paced_target = r"Ceiling, h2 transport CPU per call <= 0\.7x grpc-go alone's \(empty, Go loadgen paced .*"
    assert re.search(paced_target + r"\*\*(NOT )?met\*\*", out)
    assert "FAILED" not in out


@pytest.fixture
def compare(monkeypatch):
    """bench.compare from this checkout (pytest puts only tests/ on sys.path)."""
    monkeypatch.syspath_prepend(str(REPO))
    return importlib.import_module("bench.compare")


def _flag(argv: list, name: str):
    return argv[argv.index(name) + 1] if name in argv else None


def test_paced_client_command(compare):
    """loadgen_paced: 8 connections x 4 callers, -rate from --paced-rate
    (4,000 by default), the empty workload only; the saturating loadgen
    keeps its closed loop."""
    for given, rate in (([], "4000"), (["--paced-rate", "1500"], "1500")):
        args = compare.parse_args(["--clients", "loadgen,loadgen_paced", *given])
        clients = compare.client_kinds(args, Path("loadgen"), None)
        paced = clients["loadgen_paced"]
        argv = paced.command("127.0.0.1:1", compare.WORKLOADS["empty"], 2.0, 0.5, False)
        assert (_flag(argv, "-rate"), _flag(argv, "-conns"), _flag(argv, "-concurrency")) == (rate, "8", "4")
        assert paced.rate == float(rate) and not paced.saturating and paced.workloads == ("empty",)
        closed = clients["loadgen"].command("127.0.0.1:1", compare.WORKLOADS["empty"], 2.0, 0.5, False)
        assert _flag(closed, "-rate") is None and clients["loadgen"].saturating


def _row(server: str, client: str, cpu_us: float) -> dict:
    return {
        "server": server,
        "client": client,
        "workload": "empty",
        "calls_per_s": {"median": 1000.0},
        "server_cpu_us_per_call": {"median": cpu_us},
    }


def test_issue24_targets(compare):
    """CPU per call against grpc-go alone in the same cell (G), and h2
    against grpc-go's transport under 32 grpcio threads: met, NOT met, or
    not measured when a row is missing."""
    rows = [
        _row("grpcgo", "loadgen", 10.0),
        _row("ceiling_h2", "loadgen", 5.0),  # 0.5 G <= 0.6
        _row("lowlevel_h2", "loadgen", 9.0),  # 0.9 G > 0.85
        _row("grpcgo", "loadgen_paced", 20.0),
        _row("lowlevel_h2", "loadgen_paced", 18.0),  # 0.9 G <= 0.9
        _row("ceiling", "grpcio_8x4", 20.0),
        _row("ceiling_h2", "grpcio_8x4", 15.0),  # 25% below
        _row("native_sync", "grpcio_8x4", 20.0),
        _row("native_sync_h2", "grpcio_8x4", 17.0),  # 15% below
    ]
    got = {label: (met, text) for label, met, text in compare.issue24_targets(rows, {})}

    def g(server, limit, client="Go loadgen"):
        return got[f"{server} CPU per call <= {limit}x grpc-go alone's (empty, {client})"]

    def transports(server):
        return got[f"32 grpcio client threads: {server} CPU per call on the h2 transport at least 20% below "
                   "grpc-go's transport (empty)"]  # fmt: skip

    assert g("ceiling_h2", 0.6) == (True, "0.50x (5.0 vs 10.0 µs)")
    assert g("lowlevel_h2", 0.85)[0] is False
    assert g("lowlevel_h2", 0.9, "loadgen_paced")[0] is True
    assert g("ceiling_h2", 0.7, "loadgen_paced") == (None, "not measured")
    assert g("native_aio_h2", 1.3) == (None, "not measured")
    assert transports("ceiling")[0] is True
    assert transports("native_sync")[0] is False
    assert transports("lowlevel") == (None, "not measured")
    # server() is held to the same with 16 workers.
    assert g("native_sync16_h2", 1.3) == (None, "not measured")
    assert transports("native_sync16") == (None, "not measured")


def _described_pygrpc_native(pythonpath: Path) -> str:
    """machine_description()'s pygrpc_native entry, in a child whose
    sys.path starts with `pythonpath`, as a server child's would."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), str(REPO)])
    proc = subprocess.run(
        [sys.executable, "-c", "from bench import harness; print(harness.machine_description()['pygrpc_native'])"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_header_names_a_pygrpc_native_that_is_not_installed(tmp_path):
    """Under `bazel run //bench:compare` the servers import the Bazel-built
    package from the runfiles, which has no distribution metadata: the header
    gives its __version__ and folder, not "not installed" or the version of
    another copy installed in the environment."""
    package = tmp_path / "pygrpc_native"
    package.mkdir()
    (package / "__init__.py").write_text('"""A stand-in."""\n\n__version__ = "9.8.7"\n')
    assert _described_pygrpc_native(tmp_path) == f"9.8.7 (not installed: from {package})"
