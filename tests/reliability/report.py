"""Runs the reliability tests (tests/reliability, which probe our servers
and, in the same tests, grpcio's and plain grpc-go as controls), and writes
the figures they recorded to docs/reliability.md:

    build/venv/bin/python -m tests.reliability.report           # short run, a few minutes
    PGN_RELIABILITY_LONG=1 build/venv/bin/python -m tests.reliability.report   # long run
    PGN_TRANSPORT=grpcgo build/venv/bin/python -m tests.reliability.report     # docs/reliability-grpcgo.md

Every figure here is one a test measured and held to its bar (or, for a
control, measured alongside): nothing is probed by the report itself.
Needs the package installed in the venv (scripts/test.sh does it), Go (to
build bench/goserver) and h2spec (scripts/test.sh installs it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import grpc  # noqa: E402

import h2spec  # noqa: E402
import scale as scales  # noqa: E402
from harness import GRPC_GO, ROOT, TRANSPORT  # noqa: E402
from summary import VERDICTS  # noqa: E402

COLUMNS = {
    "server": "server()",
    "aio": "aio.server()",
    "lowlevel": "low-level",
    "grpc": "grpc.server()",
    "grpc_aio": "grpc.aio.server()",
    GRPC_GO: "grpc-go",
}
# Column order.
KINDS = ("server", "aio", "lowlevel", "grpc", "grpc_aio", GRPC_GO)


def sections(s: scales.Scale) -> List[Tuple[str, str]]:
    """The report's sections, in order, as the tests record them: title
    and what the probe does."""
    return [
        ("Load and soak", f"4 client threads calling a unary echo at full speed for {s.soak_seconds:g} s; "
         "growth compares the end with the samples just after the first third (warm-up)."),
        ("Disconnects", f"Rounds of {s.disconnects:,} clients vanishing mid-call (half RST_STREAM, half TCP "
         "close; unary with a callback, server-streaming, bidi): a warm-up round, then three measured; "
         "leaked calls from metrics(), RSS growth to the smallest of the three."),
        ("Idle connections", f"{s.idle_connections} connections that send half a preface and stop; "
         "p99 of 50 live calls meanwhile."),
        ("Rapid reset", f"{s.rapid_resets:,} whole calls (request and END_STREAM) to a 20 ms method, each reset "
         "at once, on one connection (CVE-2023-44487); server CPU per reset call."),
        ("CONTINUATION flood (NULs)", "a header block that never ends (16 KiB CONTINUATION frames of NULs, up to "
         "64 MiB, client send buffer 64 KiB); growth of the server's peak RSS."),
        ("CONTINUATION flood (fields)", "the same with well-formed fields (`x-pad` and 100 bytes, never indexed) "
         "instead of NULs: a server must stop at its header list limit."),
        ("Stalled streams", f"{s.stalled_streams} streams asking for 100 MB each, never reading "
         "(no WINDOW_UPDATE): memory per stream, and the server's CPU over a second once they are stalled."),
        ("Stalled streams, wide windows", "3 streams asking for 100 MB each on one connection whose client "
         "grants 2^31-1 of window (stream and connection) and never reads: growth of the server's RSS after 2 s."),
        ("PING flood, acks never read", "PINGs as fast as a client can send them for 3 s, its receive buffer "
         "4 KiB, the acks never read: growth of the server's RSS, whether it stopped reading."),
        ("Over the limits", "from a grpcio client; the status names."),
        ("Malformed frames", "raw HTTP/2 from a socket; the answer: grpc-status, RST_STREAM or GOAWAY code."),
        ("maximum_concurrent_rpcs", "limit 4; 10 calls to a 500 ms method at once, one connection each, twice."),
        ("Metrics after a storm", "calls that end every way (vanishing clients, rapid reset, deadlines, handler "
         "errors, an unknown method), then the front's counters once quiet."),
        ("Handler faults", "the status each call ends with."),
        ("Stop under load", "8 clients calling a 50 ms method; stop with grace 1 s."),
        ("Calls reset while queued", "400 calls in bursts of 50, each reset 5 ms after it was sent; "
         "handlers sleep 20 ms, 4 workers (issue 19 bug 1)."),
        ("TLS", "against a mutual-TLS port: how each bad client is turned away (the call's status, or how the "
         "connection ends), then a trusted client."),
        ("h2spec", f"h2spec {h2spec.VERSION}, every case, 1 s timeout, against ours and plain grpc-go side by side; "
         f"a case failing on ours only is rerun alone {h2spec.RERUNS} times on each."),
    ]


def run_tests(record: Path) -> int:
    """pytest on tests/reliability, recording into record; its exit code."""
    env = dict(os.environ, PGN_REL_RECORD=str(record))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(HERE)]
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def recorded(record: Path) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """section -> kind -> figures; h2spec's kinds are "kind path"."""
    out: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for line in record.read_text().splitlines():
        r = json.loads(line)
        kind = r["kind"] if r["section"] != "h2spec" else f"{r['kind']} {r['figures'].pop('path')}"
        out.setdefault(r["section"], {})[kind] = r["figures"]
    return out


def _ordered(results: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    return dict(sorted(results.items(), key=lambda kv: KINDS.index(kv[0].split()[0])))


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    return str(value)


def table(results: Dict[str, Dict[str, Any]]) -> List[str]:
    """Rows are figures (nested dicts become one row per key), columns kinds."""
    kinds = list(results)
    rows: Dict[str, Dict[str, Any]] = {}
    for kind, figures in results.items():
        for key, value in figures.items():
            if isinstance(value, dict) and key in ("outcomes", "metrics"):
                for case, outcome in value.items():
                    rows.setdefault(case, {})[kind] = outcome
            else:
                rows.setdefault(key.replace("_", " "), {})[kind] = value
    def column(kind: str) -> str:
        name, _, path = kind.partition(" ")
        return COLUMNS[name] + (f", -P {path}" if path else "")

    out = ["| | " + " | ".join(column(k) for k in kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
    for name, by_kind in rows.items():
        out.append(f"| {name} | " + " | ".join(_cell(by_kind.get(k)) for k in kinds) + " |")
    return out


def _anchor(title: str) -> str:
    """GitHub's anchor for a heading."""
    return "".join(c for c in title.lower().replace(" ", "-") if c.isalnum() or c in "-_")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    name = "reliability.md" if TRANSPORT == "h2" else f"reliability-{TRANSPORT}.md"
    parser.add_argument("--out", default=str(ROOT / "docs" / name))
    args = parser.parse_args()
    s = scales.current()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "figures.jsonl"
        record.touch()
        rc = run_tests(record)
        results = recorded(record)
    body: List[str] = []
    verdicts: List[str] = ["| Probe | ours (worst of them) | controls |", "|---|---|---|"]
    for title, what in sections(s):
        if title not in results:
            body += [f"### {title}", "", "(not run: see the test output)", ""]
            continue
        by_kind = _ordered(results[title])
        body += [f"### {title}", "", what, "", *table(by_kind), ""]
        ours, theirs = VERDICTS[title](by_kind)
        verdicts.append(f"| [{title}](#{_anchor(title)}) | {ours} | {theirs} |")
    header = [
        "# Reliability figures",
        "",
        "Produced by `python -m tests.reliability.report`, which runs the tests of [the suite](#the-suite) and "
        "tabulates what they measured; don't edit by hand.",
        "",
        f"- Run: {s.name} ({'PGN_RELIABILITY_LONG=1' if s.name == 'long' else 'the short run CI makes'}), "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}, {round((time.monotonic() - t0) / 60, 1)} min; "
        f"tests {'passed' if rc == 0 else f'FAILED (pytest exit code {rc})'}",
        f"- Transport of ours: `{TRANSPORT}` (PGN_TRANSPORT)",
        f"- Machine: {os.cpu_count()} CPUs, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}, grpcio {grpc.__version__}",
        "- Columns: ours (`server()`, `aio.server()`, the low-level `NativeGrpcFront`) and the controls "
        "(`grpc.server()`, `grpc.aio.server()`, plain grpc-go from bench/goserver), each measured by the same "
        "test. Every server runs the same servicer (tests/reliability/serve.py) in a process of its own; `–` "
        "means not applicable (grpcio has no metrics(); the low-level API has no callbacks).",
        "",
    ]
    summary = ["## Summary", "", *verdicts, "", "## Figures", ""]
    Path(args.out).write_text("\n".join(header + summary + body + _SUITE))
    print(f"wrote {args.out}", file=sys.stderr)
    sys.exit(rc)


_SUITE = """## The suite

`tests/reliability/` holds the probes (`probes.py`), the server they run
against (`serve.py`) and the tests that hold our servers to a bar, each
test measuring the controls (grpcio's servers, plain grpc-go) alongside
where grpcio's or grpc-go's behaviour is the reference. Every bar was
checked to fail by breaking a server on purpose (each test file says how).

| Test file | What must hold |
|---|---|
| `test_rel_load.py` | once warm, RSS grows under 5 %, OS threads by 4 at most, goroutines by 10 at most; no call fails (controls too) |
| `test_rel_disconnects.py` | no leaked call in `metrics()`, the metrics invariant, every callback fired, a live call answered promptly (controls too) |
| `test_rel_hostile.py` | live calls served during idle connections; rapid reset runs at most 1 % of the reset calls' handlers and no more CPU per reset than grpcio; CONTINUATION floods (NULs, well-formed fields) cut off within 4 MiB sent and 4 MiB of peak RSS (fields: a known failure of grpc-go's transport, xfail there); stalled streams hold bounded memory; limits refused as grpcio does; 26 malformed-frame cases answered as grpc-go answers them |
| `test_rel_limits.py` | `maximum_concurrent_rpcs` runs and refuses as grpcio does, twice in a row; after a storm of calls ending every way, calls_started == completed + cancelled + deadline_exceeded + active, only the Stats call active, no event queued, one connection open |
| `test_rel_faults.py` | handler faults end calls as grpcio's servers do; stop under load answers every call and exits; calls reset while queued are skipped (bug 1) |
| `test_rel_h2spec.py` | h2spec run on ours and plain grpc-go side by side: no case fails on ours (alone, repeatedly) that passes on grpc-go |
| `test_rel_tls.py` | plaintext, garbage ClientHellos and untrusted or missing client certificates turned away as grpcio does; trusted clients still served |

They run with the rest of the suite (`bash scripts/test.sh`), at the short
scale. The long run: `PGN_RELIABILITY_LONG=1 build/venv/bin/python -m pytest tests/reliability`
(10-minute soak, 10,000 disconnects, 2,000 idle connections, h2spec on
every kind and path, ...). `PGN_TRANSPORT=<name>` runs the suite with our
servers on that transport (the controls are unchanged); failures name it.
The Go frame-differential test (`go/front/framediff_test.go`) replays
scripted HTTP/2 frames against plain grpc-go and each transport of the
front. The Go fuzz targets run briefly in scripts/test.sh; longer with
`PGN_FUZZTIME=10m`. Fork and spawn are covered by `tests/test_lowlevel_fork.py`.
""".split("\n")


if __name__ == "__main__":
    main()
