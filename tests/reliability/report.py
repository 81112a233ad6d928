"""Runs every reliability probe against our servers and grpcio's (the
controls), and writes the figures to docs/reliability.md:

    build/venv/bin/python -m tests.reliability.report           # short run, a few minutes
    PGN_RELIABILITY_LONG=1 build/venv/bin/python -m tests.reliability.report   # long run

Needs the package installed in the venv (scripts/test.sh does it), Go (to
build bench/goserver) and h2spec (scripts/test.sh installs it; without it
the h2spec section says so). It also rewrites h2spec_grpcgo_failures.txt,
the grpc-go baseline the h2spec test compares with.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import grpc  # noqa: E402

import h2spec  # noqa: E402
import probes  # noqa: E402
import scale as scales  # noqa: E402
from summary import VERDICTS  # noqa: E402
from harness import GRPC_GO, ROOT, ServerProcess  # noqa: E402
from tls_certs import make_pki  # noqa: E402

COLUMNS = {
    "server": "server()",
    "aio": "aio.server()",
    "lowlevel": "low-level",
    "grpc": "grpc.server()",
    "grpc_aio": "grpc.aio.server()",
    GRPC_GO: "grpc-go",
}
ALL = ("server", "aio", "lowlevel", "grpc", "grpc_aio")
SERVERS = ("server", "aio", "grpc", "grpc_aio")


class Probe:
    """One section of the report: a probe run on a fresh server of each kind."""

    def __init__(self, title: str, what: str, kinds: Sequence[str], run: Callable[[ServerProcess], Dict[str, Any]],
                 workers: int = 16, tls: bool = False) -> None:
        self.title, self.what, self.kinds, self.run = title, what, kinds, run
        self.workers, self.tls = workers, tls


def probes_for(s: scales.Scale, pki: Any) -> List[Probe]:
    return [
        Probe("Load and soak", f"4 client threads calling a unary echo at full speed for {s.soak_seconds:g} s; "
              "growth compares the end with the samples just after the first third (warm-up).", ALL,
              lambda srv: probes.load_soak(srv, s)),
        Probe("Disconnects", f"{s.disconnects} clients vanishing mid-call (half RST_STREAM, half TCP close; unary "
              "with a callback, server-streaming, bidi), after a warm-up round as large; leaked calls from "
              "metrics(), RSS growth over the measured round.", ALL,
              lambda srv: probes.disconnects(srv, s)),
        Probe("Idle connections", f"{s.idle_connections} connections that send half a preface and stop; "
              "p99 of 50 live calls meanwhile.", SERVERS, lambda srv: probes.idle_connections(srv, s)),
        Probe("Rapid reset", f"{s.rapid_resets} streams opened and reset at once on one connection "
              "(CVE-2023-44487).", SERVERS, lambda srv: probes.rapid_reset(srv, s)),
        Probe("CONTINUATION flood", "a header block that never ends (16 KiB CONTINUATION frames, up to 64 MiB).",
              SERVERS, probes.continuation_flood),
        Probe("Stalled streams", f"{s.stalled_streams} streams asking for 100 MB each, never reading "
              "(no WINDOW_UPDATE).", SERVERS, lambda srv: probes.stalled_streams(srv, s),
              workers=2 * s.stalled_streams + 8),
        Probe("Over the limits", "from a grpcio client; the status names.", SERVERS, probes.over_limits),
        Probe("Malformed frames", "raw HTTP/2 from a socket; the answer: grpc-status, RST_STREAM or GOAWAY code.",
              (*SERVERS, GRPC_GO), probes.raw_frames),
        Probe("Handler faults", "the status each call ends with.", SERVERS, probes.handler_faults),
        Probe("Stop under load", "8 clients calling a 50 ms method; stop with grace 1 s.", ALL,
              probes.stop_under_load),
        Probe("Calls reset while queued", "400 calls in bursts of 50, each reset 5 ms after it was sent; "
              "handlers sleep 20 ms, 4 workers (issue 19 bug 1).", ("server", "grpc"), probes.cancelled_while_queued,
              workers=4),
        Probe("TLS", "against a mutual-TLS port: how each bad client is turned away (the call's status, or how the "
              "connection ends), then a trusted client.", SERVERS, lambda srv: probes.tls_garbage(srv, pki), tls=True),
    ]


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    return str(value)


def table(results: Dict[str, Dict[str, Any]]) -> List[str]:
    """Rows are figures (nested dicts become one row per key), columns kinds."""
    kinds = list(results)
    rows: Dict[str, Dict[str, Any]] = {}
    for kind, figures in results.items():
        for key, value in figures.items():
            if isinstance(value, dict) and key == "outcomes":
                for case, outcome in value.items():
                    rows.setdefault(case, {})[kind] = outcome
            else:
                rows.setdefault(key.replace("_", " "), {})[kind] = value
    out = ["| | " + " | ".join(COLUMNS[k] for k in kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
    for name, by_kind in rows.items():
        out.append(f"| {name} | " + " | ".join(_cell(by_kind.get(k)) for k in kinds) + " |")
    return out


def _anchor(title: str) -> str:
    """GitHub's anchor for a heading."""
    return "".join(c for c in title.lower().replace(" ", "-") if c.isalnum() or c == "-")


def run_h2spec() -> List[str]:
    if h2spec.binary() is None:
        return ["h2spec is not installed (scripts/test.sh installs it); not run."]
    found: Dict[str, set] = {}
    for kind in (GRPC_GO, "server", "aio"):
        with ServerProcess(kind) as srv:
            found[kind] = h2spec.failures(srv.port)
    h2spec.GRPC_GO_FAILURES.write_text("\n".join(sorted(found[GRPC_GO])) + "\n")
    lines = ["| | " + " | ".join(COLUMNS[k] for k in found) + " |", "|---" * (len(found) + 1) + "|",
             "| cases failed (of 145) | " + " | ".join(str(len(v)) for v in found.values()) + " |"]
    extras, again = [], []
    for kind in ("server", "aio"):
        with ServerProcess(kind) as srv:
            extra = found[kind] - found[GRPC_GO]
            extras.append(", ".join(sorted(extra)) or "none")
            again.append(", ".join(sorted(h2spec.confirmed(srv.port, extra))) or "none")
    lines.append("| failures grpc-go doesn't have | – | " + " | ".join(extras) + " |")
    lines.append("| of those, failing again when run alone (twice) | – | " + " | ".join(again) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "reliability.md"))
    args = parser.parse_args()
    s = scales.current()
    t0 = time.monotonic()
    sections: List[str] = []
    verdicts: List[str] = ["| Probe | ours (worst of them) | controls |", "|---|---|---|"]
    pki = make_pki()
    with tempfile.TemporaryDirectory() as tmp:
        tls_dir = probes.write_tls_files(pki, Path(tmp))
        for probe in probes_for(s, pki):
            results: Dict[str, Dict[str, Any]] = {}
            for kind in probe.kinds:
                print(f"{probe.title}: {kind}", file=sys.stderr, flush=True)
                with ServerProcess(kind, workers=probe.workers, tls_dir=tls_dir if probe.tls else None) as srv:
                    results[kind] = probe.run(srv)
            sections += [f"### {probe.title}", "", probe.what, "", *table(results), ""]
            ours, theirs = VERDICTS[probe.title](results)
            verdicts.append(f"| [{probe.title}](#{_anchor(probe.title)}) | {ours} | {theirs} |")
    print("h2spec", file=sys.stderr, flush=True)
    h2 = run_h2spec()
    sections += ["### h2spec", "", f"h2spec {h2spec.VERSION}, every case, 2 s timeout.", "", *h2, ""]
    verdicts.append(f"| [h2spec](#h2spec) | failing beyond grpc-go's failures: "
                    f"{h2[-1].split('|')[3].strip() if len(h2) > 1 else 'not run'} (README: races) | "
                    "grpc-go: the reference |")
    header = [
        "# Reliability figures",
        "",
        "Produced by `python -m tests.reliability.report` (see [the suite](#the-suite)); don't edit by hand.",
        "",
        f"- Run: {s.name} ({'PGN_RELIABILITY_LONG=1' if s.name == 'long' else 'the short run CI makes'}), "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}, {round((time.monotonic() - t0) / 60, 1)} min",
        f"- Machine: {os.cpu_count()} CPUs, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}, grpcio {grpc.__version__}",
        "- Columns: ours (`server()`, `aio.server()`, the low-level `NativeGrpcFront`) and the controls "
        "(`grpc.server()`, `grpc.aio.server()`, plain grpc-go from bench/goserver). Every server runs the same "
        "servicer (tests/reliability/serve.py) in a process of its own; `–` means not applicable "
        "(grpcio has no metrics(); the low-level API has no callbacks).",
        "",
    ]
    summary = ["## Summary", "", *verdicts, "", "## Figures", ""]
    Path(args.out).write_text("\n".join(header + summary + sections + _SUITE))
    print(f"wrote {args.out}", file=sys.stderr)


_SUITE = """## The suite

`tests/reliability/` holds the probes (`probes.py`), the server they run
against (`serve.py`) and the tests that hold our servers to a bar and,
where grpcio's behaviour is the reference, to the control's answers:

| Test file | What must hold |
|---|---|
| `test_rel_load.py` | once warm, RSS grows under 5 %, OS threads by 4 at most, goroutines by 10 at most; no call fails |
| `test_rel_disconnects.py` | no leaked call in `metrics()`, every callback fired, a live call answered promptly (control too) |
| `test_rel_hostile.py` | live calls served during idle connections, rapid reset, CONTINUATION floods (cut off), stalled streams (bounded memory); limits refused as grpcio does; malformed frames answered as grpc-go answers them |
| `test_rel_faults.py` | handler faults end calls as grpcio's servers do; stop under load answers every call and exits; calls reset while queued are skipped (bug 1) |
| `test_rel_h2spec.py` | no h2spec failure that grpc-go doesn't have, beyond the races README lists |
| `test_rel_tls.py` | plaintext, garbage ClientHellos and untrusted or missing client certificates turned away as grpcio does; trusted clients still served |

They run with the rest of the suite (`bash scripts/test.sh`), at the short
scale. The long run: `PGN_RELIABILITY_LONG=1 build/venv/bin/python -m pytest tests/reliability`
(10-minute soak, 10,000 disconnects, 2,000 idle connections, ...). The Go
fuzz targets run briefly in scripts/test.sh; longer with `PGN_FUZZTIME=10m`.
Fork and spawn are covered by `tests/test_lowlevel_fork.py`.
""".split("\n")


if __name__ == "__main__":
    main()
