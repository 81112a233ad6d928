"""Benchmark servers, each run as its own process (``python -m bench.servers.<name>``).

Protocol, shared by every server here so the driver can treat them alike:

* takes ``--host`` (loopback only) and ``--port`` (0 picks a free one), plus its own options;
* prints ``PORT <n>`` on stdout, flushed, once it accepts calls;
* serves ``/echo.Echo/Say`` (unary, raw bytes echoed back) until SIGTERM or SIGINT;
* then stops with a short grace period and exits 0.
"""
