"""//bazel:wheel_test: the host's wheel (//:wheel) installs with its dependencies and answers calls.

As a user would install it: a clean venv, `pip install <wheel>`, which reads
the wheel's `Requires-Dist: grpcio>=1.64` and fetches grpcio from the pip
index (PyPI): the test needs the network (Bazel's sandbox lets tests reach
it unless told otherwise; the target is tagged `requires-network`). Nothing
comes from the test's runfiles, so a missing dependency fails here. Then
wheels/smoke.py, run by the venv's interpreter from outside the source tree,
serves with pygrpc_native.server() and aio.server() and calls both with
grpcio; it checks that the installed copy is the one imported.
"""

import os
import subprocess
import sys
import tempfile
import venv
import zipfile
from pathlib import Path


def the_wheel(folder: Path) -> Path:
    """The one .whl that //:wheel's output folder holds."""
    wheels = sorted(folder.glob("*.whl"))
    assert len(wheels) == 1, f"{folder} holds {wheels}, not one wheel"
    return wheels[0]


def main() -> int:
    wheel = the_wheel(Path(sys.argv[1]).resolve())
    smoke = Path(sys.argv[2]).resolve()
    assert wheel.name.startswith("pygrpc_native-0.1.0-cp310-abi3-"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        metadata = z.read("pygrpc_native-0.1.0.dist-info/METADATA").decode()
    assert "Requires-Dist: grpcio>=1.64" in metadata.splitlines(), metadata[:800]
    with tempfile.TemporaryDirectory() as tmp:
        env_dir = Path(tmp) / "venv"
        venv.create(env_dir, with_pip=True, clear=True)
        python = env_dir / "bin" / "python"
        # The test environment (PYTHONPATH with the runfiles' packages) must not leak in.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel],
                       check=True, env=env)
        out = subprocess.run([python, "-I", smoke, "--aio"], cwd=tmp, env=env, capture_output=True, text=True)
        print(out.stdout + out.stderr)
        if out.returncode != 0 or str(env_dir) not in out.stdout:
            print("0 passed, 1 failed")
            return 1
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
