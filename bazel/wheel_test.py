"""//bazel:wheel_test: the wheel from //:wheel installs with pip and imports.

Checks the file name and tags (cp310-abi3, the extension inside the package,
RECORD), installs it with `pip install --no-deps --no-index --target` into a
temporary folder and imports pygrpc_native from there in a fresh interpreter
in which the wheel's copy comes first on sys.path (and is checked to be the
one imported).
"""

import os
import subprocess
import sys
import tempfile
import zipfile


def main() -> int:
    wheel = os.path.abspath(sys.argv[1])
    name = os.path.basename(wheel)
    assert name.startswith("pygrpc_native-0.1.0-cp310-abi3-"), name
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert "pygrpc_native/__init__.py" in names, sorted(names)
        assert "pygrpc_native/_native.abi3.so" in names, sorted(names)
        assert "pygrpc_native/py.typed" in names, sorted(names)
        wheel_meta = z.read("pygrpc_native-0.1.0.dist-info/WHEEL").decode()
        assert "Root-Is-Purelib: false" in wheel_meta, wheel_meta
        assert "Tag: cp310-abi3-" in wheel_meta, wheel_meta
        assert "pygrpc_native-0.1.0.dist-info/RECORD" in names
    with tempfile.TemporaryDirectory() as tmp:
        # grpcio (a dependency the wheel doesn't declare yet) comes from the
        # test's runfiles; pygrpc_native must come from the installed wheel.
        env = dict(os.environ)
        env["PIP_BREAK_SYSTEM_PACKAGES"] = "1"
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--no-index", "--target", tmp, wheel],
            check=True, env=env,
        )
        code = (
            "import sys; sys.path.insert(0, sys.argv[1]); import pygrpc_native, pygrpc_native._native as n; "
            "assert n.__file__.startswith(sys.argv[1]), n.__file__; "
            "f = pygrpc_native.NativeGrpcFront; print('imported', pygrpc_native.__file__)"
        )
        out = subprocess.run([sys.executable, "-c", code, tmp], env=env, capture_output=True, text=True)
        print(out.stdout + out.stderr)
        if out.returncode != 0:
            print("0 passed, 1 failed")
            return 1
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
