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
def test_compare_quick_tls():
    out = _run("grpcio_sync_tls,native_sync_tls", "grpcio_1thread", "empty")
    assert "### TLS: Empty unary" in out
    assert "| 1 grpcio thread | pygrpc_native.server() + TLS |" in out
    assert "FAILED" not in out
