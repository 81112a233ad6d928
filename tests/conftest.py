"""Shared test setup.

pytest-timeout (signal method) gives every test a time limit. A test stuck
inside native code with the GIL released can't be interrupted by a signal
handler, so an autouse watchdog (faulthandler, which runs in its own C
thread) dumps every thread's stack and ends the process if a test runs well
past its limit. Nothing can hang forever.
"""

import faulthandler
import sys

import pytest

_WATCHDOG_MARGIN = 60


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


@pytest.fixture(autouse=True)
def _watchdog(request):
    faulthandler.dump_traceback_later(_timeout_of(request.node) + _WATCHDOG_MARGIN, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
