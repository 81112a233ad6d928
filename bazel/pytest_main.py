"""Runs one test file under pytest, as a Bazel py_test's main.

    pytest_main.py tests/test_x.py [pytest args...]

The file runs with its folder's pytest.ini (when there is one) and
conftest.py, exactly as `pytest tests/test_x.py` from the source tree; the JUnit XML goes where Bazel
asks for it and pytest's temporary files under the test's own TEST_TMPDIR.
Exit code 5 (nothing collected) counts as a failure: a py_test that tests
nothing is a broken target.
"""

import os
import sys

import pytest


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: pytest_main.py TEST_FILE [pytest args...]", file=sys.stderr)
        return 2
    test_file, extra = sys.argv[1], sys.argv[2:]
    # Paths that Bazel passes in the environment relative to the runfiles
    # tree (`env` with $(rootpath)), made absolute: tests start them from
    # other working directories.
    for name in filter(None, os.environ.get("PGN_ABSPATH_ENV", "").split(",")):
        if os.environ.get(name):
            os.environ[name] = os.path.abspath(os.environ[name])
    tests_dir = os.path.dirname(os.path.abspath(test_file))
    args = ["--rootdir", tests_dir, "-p", "no:cacheprovider"]
    ini = os.path.join(tests_dir, "pytest.ini")
    if os.path.exists(ini):
        args = ["-c", ini] + args
    if os.environ.get("XML_OUTPUT_FILE"):
        args.append("--junitxml=" + os.environ["XML_OUTPUT_FILE"])
    if os.environ.get("TEST_TMPDIR"):
        args.append("--basetemp=" + os.path.join(os.environ["TEST_TMPDIR"], "pytest"))
    # Bazel's test sharding and filtering, when asked for.
    if os.environ.get("TESTBRIDGE_TEST_ONLY"):
        args += ["-k", os.environ["TESTBRIDGE_TEST_ONLY"]]
    return int(pytest.main(args + [test_file] + extra))


if __name__ == "__main__":
    sys.exit(main())
