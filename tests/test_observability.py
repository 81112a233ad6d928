"""grpcio's OpenTelemetry plugin and OpenTelemetry's gRPC tracing
interceptor on our servers, compared with grpcio's (tests/otel_checks.py).

grpcio-observability pins grpcio 1.85.0 and the main suite pins 1.85.1, so
those checks run in an environment of their own, build/venv-otel
(tests/otel-requirements.txt and this package), which scripts/test.sh makes;
OTEL_VENV=path uses another.
"""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_opentelemetry_checks() -> None:
    venv = pathlib.Path(os.environ.get("OTEL_VENV", ROOT / "build" / "venv-otel"))
    python = venv / "bin" / "python"
    if not python.exists():
        if os.environ.get("CI"):
            pytest.fail(f"no OpenTelemetry test environment at {venv}: scripts/test.sh must make it under CI")
        pytest.skip(f"no OpenTelemetry test environment at {venv}: scripts/test.sh makes it from tests/otel-requirements.txt")
    proc = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "otel_checks.py"],
        cwd=ROOT / "tests",
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-20000:] + proc.stderr[-5000:]
