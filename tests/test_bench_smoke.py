"""The benchmark harness runs: `python -m bench.compare --quick` on a few cells.

Only that it finishes, exits 0 and prints its table and targets; a benchmark
is not a test, so nothing here looks at the numbers.
"""

import os
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
    assert "### Targets (issues 7 and 14)" in out
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
