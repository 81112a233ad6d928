"""Shared test setup.

pytest-timeout (signal method) gives every test a time limit. A test stuck
inside native code with the GIL released can't be interrupted by a signal
handler, so an autouse watchdog (faulthandler, which runs in its own C
thread) dumps every thread's stack and ends the process if a test runs well
past its limit. Nothing can hang forever.

A differential test (tests/*diff*.py) that fails is run once more
(pytest-rerunfailures, when installed): it compares ours with grpcio's
servers, whose own timing races (a log line grpc.aio writes one run in 30
under load, a ping grpcio allows more when its window update rides with an
ack) failed one test in ~2,000 per CI run. A failure of ours that repeats
still fails; one that passes on the rerun is listed at the end of the run
("reruns of differential tests"), so it isn't lost.
"""

import faulthandler
import os
import pathlib
import shutil
import sys
import tempfile

import pytest

# Seconds past a test's pytest-timeout limit before the watchdog ends the run.
_WATCHDOG_MARGIN = float(os.environ.get("PYGRPC_NATIVE_TEST_WATCHDOG_MARGIN", "60"))


def _timeout_of(item):
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        if marker.args:
            return float(marker.args[0])
        if "timeout" in marker.kwargs:
            return float(marker.kwargs["timeout"])
    try:
        value = item.config.getini("timeout")
    except ValueError:
        value = None
    try:
        return float(value) if value else 120.0
    except (TypeError, ValueError):
        return 120.0


def _real_stderr(config):
    """Where the watchdog writes: the terminal's stderr, not pytest's capture
    (whose temporary file dies with the process). pytest keeps a copy of the
    original file descriptor while it captures; use it when it's there."""
    capman = config.pluginmanager.getplugin("capturemanager")
    try:
        fd = capman._global_capturing.err.targetfd_save
    except AttributeError:
        fd = None
    return fd if isinstance(fd, int) else sys.stderr


@pytest.fixture(autouse=True)
def _watchdog(request):
    limit = _timeout_of(request.node) + _WATCHDOG_MARGIN
    out = _real_stderr(request.config)
    try:
        faulthandler.dump_traceback_later(limit, exit=True, file=out)
    except (OSError, ValueError):
        faulthandler.dump_traceback_later(limit, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def tmp_path():
    """A per-test directory under /tmp, removed afterwards. Unix socket paths
    must fit in 107 bytes, and pytest's own directories are deeper than that
    inside Bazel's test sandbox."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="pgn-test-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    if not config.pluginmanager.hasplugin("rerunfailures"):
        return
    for item in items:
        if "diff" in item.path.name and item.get_closest_marker("flaky") is None:
            item.add_marker(pytest.mark.flaky(reruns=1, reruns_delay=1))


def pytest_terminal_summary(terminalreporter):
    reruns = terminalreporter.stats.get("rerun", [])
    if reruns:
        terminalreporter.section("reruns of differential tests")
        for report in reruns:
            crash = getattr(report.longrepr, "reprcrash", None)
            why = crash.message if crash is not None else str(report.longrepr)
            terminalreporter.line(f"{report.nodeid}: {why.splitlines()[0] if why else ''}")
