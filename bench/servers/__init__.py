"""Benchmark servers, each run as its own process (``python -m bench.servers.<name>``).

Protocol, shared by every server here (and by the Go ones in bench/ceiling and
bench/goserver) so the driver can treat them alike:

* takes ``--host`` (loopback only) and ``--port`` (0 picks a free one), plus its own options;
  the Python ones also take ``--tls-cert`` / ``--tls-key`` (PEM files) to serve TLS;
* prints ``PORT <n>`` on stdout, flushed, once it accepts calls;
* serves, with raw bytes (no serializers), until SIGTERM or SIGINT:

  - ``/echo.Echo/Say``, unary: the request is sent back;
  - ``/echo.Echo/Count``, server streaming: the request is a count N as 4
    big-endian bytes followed by a body, and the body is sent back N times;
  - ``/echo.Echo/Collect``, client streaming: the client sends messages and
    half-closes; the last message received is sent back (an empty message if
    there was none);
  - ``/echo.Echo/Chat``, bidi streaming: every message is sent back as it
    arrives; the call ends OK when the client half-closes;

* then stops with a short grace period and exits 0.
"""
