"""Benchmark clients run as their own processes.

Every client (the Go loadgen and the Python one here) follows one protocol, so the
driver can measure any of them against any server:

* with ``--sync`` (``-sync`` for the loadgen) it prints ``MEASURE_START`` when its
  warmup ends and ``MEASURE_END`` when the measured window closes;
* then one JSON object on a line: ``calls``, ``errors``, ``errors_by_code``,
  ``bad_responses``, ``calls_per_s``, ``p50_us``, ``p99_us``, ``duration_s``.

Only calls that completed inside the window, with status OK and the echoed bytes
(for server-streaming calls: exactly the expected number of messages, each the
expected bytes), count as ``calls``.
"""
