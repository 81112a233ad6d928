"""h2spec (github.com/summerwind/h2spec, the HTTP/2 conformance suite)
against running servers: which cases fail, and which fail on ours but not
on plain grpc-go run alongside (the oracle).

scripts/test.sh installs the pinned h2spec into build/tools/ from the Go
module proxy; PGN_H2SPEC names another binary.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List, Optional, Set

from harness import ROOT, ServerProcess

VERSION = "v2.2.1+incompatible"
# How many times a case is rerun alone, on each server, when it failed on
# ours but not on grpc-go in the full run.
RERUNS = 3


def binary() -> Optional[Path]:
    path = Path(os.environ.get("PGN_H2SPEC") or ROOT / "build" / "tools" / "h2spec")
    return path if path.exists() else None


def failures(port: int, path: str, timeout_s: int = 1, case: Optional[str] = None) -> Set[str]:
    """The failed (or errored) cases, as "package#n" (e.g. "http2/5.1.2#1"),
    with requests to path (h2spec's -P); with case ("http2/5.1.2/1"),
    that case only."""
    exe = binary()
    assert exe is not None, "h2spec is not installed: run scripts/test.sh, or set PGN_H2SPEC"
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "h2spec.xml"
        cmd = [str(exe), "-h", "127.0.0.1", "-p", str(port), "-P", path, "--timeout", str(timeout_s), "-j", str(report)]
        subprocess.run(cmd + ([case] if case else []), capture_output=True, timeout=600)
        return _failed_cases(report)


def _failed_cases(report: Path) -> Set[str]:
    out = set()
    for suite in ET.parse(report).getroot():
        for n, case in enumerate(suite.findall("testcase"), 1):
            if case.find("error") is not None or case.find("failure") is not None:
                out.add(f"{suite.get('package')}#{n}")
    return out


def _alone(port: int, path: str, case: str) -> int:
    """How many of RERUNS runs of case alone (3 s timeout) fail."""
    return sum(case in failures(port, path, 3, case.replace("#", "/")) for _ in range(RERUNS))


def compare(ours: ServerProcess, oracle: ServerProcess, root_path: bool = False) -> Dict[str, object]:
    """Every case against ours and the oracle at once, requests to each
    one's unary echo method (or to "/" with root_path). A case that failed
    on ours only is rerun alone RERUNS times on each: it is ours only
    ("extra") if it fails on ours at least twice and never on the oracle;
    otherwise it was a race of the full run (a 1 s timeout on a loaded
    machine), reported as such."""
    paths = {s.kind: "/" if root_path else s.say_path for s in (ours, oracle)}
    found: Dict[str, Set[str]] = {}
    threads = [threading.Thread(target=lambda s=s: found.__setitem__(s.kind, failures(s.port, paths[s.kind])))
               for s in (ours, oracle)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    extra: List[str] = []
    races: List[str] = []
    for case in sorted(found[ours.kind] - found[oracle.kind]):
        mine, theirs = _alone(ours.port, paths[ours.kind], case), _alone(oracle.port, paths[oracle.kind], case)
        (extra if mine >= 2 and theirs == 0 else races).append(case)
    return {
        "path": paths[ours.kind],
        "cases failed (of 145)": len(found[ours.kind]),
        "grpc-go cases failed": len(found[oracle.kind]),
        "failures grpc-go doesn't have": extra,
        "full-run races (not failing alone)": races,
        "grpc-go failures ours doesn't have": sorted(found[oracle.kind] - found[ours.kind]),
    }
