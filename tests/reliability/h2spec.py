"""h2spec (github.com/summerwind/h2spec, the HTTP/2 conformance suite)
against a running server: which cases fail.

scripts/test.sh installs the pinned h2spec into build/tools/ from the Go
module proxy; PGN_H2SPEC names another binary.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Optional, Set

from harness import ROOT

VERSION = "v2.2.1+incompatible"
# grpc-go's own failures (bench/goserver), as report.py last measured them.
GRPC_GO_FAILURES = Path(__file__).with_name("h2spec_grpcgo_failures.txt")
# Failures of ours that grpc-go doesn't have, each explained in the README
# ("HTTP/2 conformance"): all are races in what h2spec reads first.
KNOWN_EXTRA = {"http2/4.3#3", "http2/5.1.2#1", "http2/5.5#2", "http2/6.2#1"}


def binary() -> Optional[Path]:
    path = Path(os.environ.get("PGN_H2SPEC") or ROOT / "build" / "tools" / "h2spec")
    return path if path.exists() else None


def failures(port: int, timeout_s: int = 2, case: Optional[str] = None) -> Set[str]:
    """The failed (or errored) cases, as "package#n" (e.g. "http2/5.1.2#1");
    with case ("http2/5.1.2/1"), that case only."""
    exe = binary()
    assert exe is not None, "h2spec is not installed: run scripts/test.sh, or set PGN_H2SPEC"
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "h2spec.xml"
        cmd = [str(exe), "-h", "127.0.0.1", "-p", str(port), "--timeout", str(timeout_s), "-j", str(report)]
        subprocess.run(cmd + ([case] if case else []), capture_output=True, timeout=600)
        return _failed_cases(report)


def _failed_cases(report: Path) -> Set[str]:
    out = set()
    for suite in ET.parse(report).getroot():
        for n, case in enumerate(suite.findall("testcase"), 1):
            if case.find("error") is not None or case.find("failure") is not None:
                out.add(f"{suite.get('package')}#{n}")
    return out


def confirmed(port: int, found: Set[str], tries: int = 2) -> Set[str]:
    """The cases of found that fail again when run alone, with a longer
    timeout: a timeout on a busy machine, or a race, is not a failure."""
    still = set(found)
    for _ in range(tries):
        still = {c for c in still if c in failures(port, 5, c.replace("#", "/"))}
    return still


def grpc_go_failures() -> Set[str]:
    return set(GRPC_GO_FAILURES.read_text().split())
