"""Runs the gRPC interop test cases against our servers and prints a matrix.

    python tests/interop/run_matrix.py [--impls native,native_aio,grpcio,grpcio_aio]
        [--transports plaintext,tls] [--cases a,b] [--markdown FILE]

Servers: tests/interop/server.py under pygrpc_native.server() ("native"),
pygrpc_native.aio.server() ("native_aio"), and grpcio's grpc.server() /
grpc.aio.server() as controls. One server per (server, transport), reused by
every case; 127.0.0.1 only. TLS uses a CA and a server certificate (for
localhost and 127.0.0.1) made for the run.

Client: grpc-go's interop client (google.golang.org/grpc/interop/client) at
the grpc-go version of the project's go.mod, built with `go install
...@version` (Go module proxy) into build/interop/ and reused from there;
INTEROP_CLIENT=/path/to/binary uses another build. It runs once per case.
client_compressed_* and server_compressed_* are cases grpc-go's client
doesn't implement: they run with our own grpcio client
(compressed_client.py), which in plaintext also checks the compressed flag
of every message on the wire.

Exits 1 if any case fails. Every step has a time limit.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import ipaddress
import os
import pathlib
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import protos  # noqa: E402

# The cases of issue 8, in the order of the interop descriptions' client list.
GO_CASES = (
    "empty_unary",
    "large_unary",
    "client_streaming",
    "server_streaming",
    "ping_pong",
    "empty_stream",
    "timeout_on_sleeping_server",
    "cancel_after_begin",
    "cancel_after_first_response",
    "status_code_and_message",
    "special_status_message",
    "custom_metadata",
    "unimplemented_method",
    "unimplemented_service",
)
OWN_CASES = (
    "client_compressed_unary",
    "client_compressed_streaming",
    "server_compressed_unary",
    "server_compressed_streaming",
)
ALL_CASES = GO_CASES + OWN_CASES

IMPLS = ("native", "native_aio", "grpcio", "grpcio_aio")
TRANSPORTS = ("plaintext", "tls")

SERVER_START_TIMEOUT = 60.0
SERVER_STOP_TIMEOUT = 15.0
CASE_TIMEOUT = 60.0
BUILD_TIMEOUT = 900.0
GO_PACKAGE = "google.golang.org/grpc/interop/client"


@dataclasses.dataclass
class Result:
    case: str
    impl: str
    transport: str
    outcome: str  # "pass" or "FAIL"
    client: str  # "grpc-go", "own" or "-"
    seconds: float = 0.0
    output: str = ""
    server_log: str = ""
    # The first run failed and a second passed (run_group): the first
    # run's client output, kept for the log.
    first_failure: str = ""

    @property
    def failed(self) -> bool:
        return self.outcome == "FAIL"


# --- the client -----------------------------------------------------------


def grpc_go_version() -> str:
    text = (ROOT / "go.mod").read_text()
    found = re.search(r"^\s*(?:require\s+)?google\.golang\.org/grpc\s+(v\S+)", text, re.M)
    if not found:
        raise RuntimeError("no google.golang.org/grpc version in go.mod")
    return found.group(1)


def ensure_client(log=print) -> pathlib.Path:
    """The grpc-go interop client binary, built on first use."""
    override = os.environ.get("INTEROP_CLIENT")
    if override:
        return pathlib.Path(override)
    version = grpc_go_version()
    dest = ROOT / "build" / "interop" / f"grpc-go-{version}"
    binary = dest / "client"
    if binary.exists():
        return binary
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("Go is needed to build grpc-go's interop client (or set INTEROP_CLIENT)")
    dest.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GOBIN=str(dest))
    # `go install pkg@version` builds with grpc-go's own go.mod; -mod flags
    # of the environment don't apply to it.
    env["GOFLAGS"] = " ".join(f for f in env.get("GOFLAGS", "").split() if not f.startswith("-mod"))
    log(f"building {GO_PACKAGE}@{version} into {dest.relative_to(ROOT)}/ ...")
    started = time.monotonic()
    proc = subprocess.run(
        [go, "install", f"{GO_PACKAGE}@{version}"],
        cwd=dest,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    if proc.returncode != 0 or not binary.exists():
        raise RuntimeError(f"go install {GO_PACKAGE}@{version} failed:\n{proc.stdout}")
    log(f"built in {time.monotonic() - started:.0f} s")
    return binary


# --- certificates ---------------------------------------------------------


def make_certs(out: pathlib.Path) -> Dict[str, pathlib.Path]:
    """A CA and a server certificate for localhost / 127.0.0.1, valid for a
    day, written as PEM files under out."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pygrpc-native interop"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def builder(subject, issuer, key) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=1)))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (builder(name("interop test CA"), name("interop test CA"), ca_key)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                            key_encipherment=False, data_encipherment=False, key_agreement=False,
                                            key_cert_sign=True, crl_sign=True, encipher_only=False,
                                            decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (builder(name("localhost"), ca_cert.subject, key)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    files = {"ca": out / "ca.pem", "cert": out / "server.pem", "key": out / "server.key"}
    files["ca"].write_bytes(ca_cert.public_bytes(pem))
    files["cert"].write_bytes(cert.public_bytes(pem))
    files["key"].write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    return files


# --- servers ----------------------------------------------------------------


class Server:
    """tests/interop/server.py in a subprocess; its stderr goes to a file."""

    def __init__(self, impl: str, transport: str, work: pathlib.Path, gen: pathlib.Path,
                 certs: Dict[str, pathlib.Path], label: str = "") -> None:
        self.impl, self.transport = impl, transport
        self.log_path = work / f"server-{impl}-{transport}{label}.log"
        cmd = [sys.executable, str(HERE / "server.py"), "--impl", impl, "--gen", str(gen)]
        if transport == "tls":
            cmd += ["--tls", "--cert", str(certs["cert"]), "--key", str(certs["key"])]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, cwd=ROOT)
        self.port = self._read_port()

    def _read_port(self) -> int:
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        line = b""
        try:
            while not line.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise RuntimeError(f"{self.impl}/{self.transport} server didn't start in time:\n{self.log_tail()}")
                chunk = os.read(self.proc.stdout.fileno(), 64)
                if not chunk:
                    raise RuntimeError(f"{self.impl}/{self.transport} server exited:\n{self.log_tail()}")
                line += chunk
        finally:
            sel.close()
        return int(line.strip())

    def log_size(self) -> int:
        self.log.flush()
        return self.log_path.stat().st_size

    def log_since(self, offset: int, limit: int = 4000) -> str:
        self.log.flush()
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
        return text if len(text) <= limit else "...\n" + text[-limit:]

    def log_tail(self, limit: int = 4000) -> str:
        return self.log_since(0, limit)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> Optional[int]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(SERVER_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(SERVER_STOP_TIMEOUT)
        self.proc.stdout.close()
        self.log.close()
        return self.proc.returncode


# --- cases ------------------------------------------------------------------


def _tls_flags(certs: Dict[str, pathlib.Path]) -> List[str]:
    return ["--use_tls=true", "--use_test_ca=true", f"--ca_file={certs['ca']}", "--server_host_override=localhost"]


def client_command(case: str, port: int, transport: str, client: pathlib.Path, gen: pathlib.Path,
                   certs: Dict[str, pathlib.Path]) -> Tuple[str, List[str]]:
    if case in OWN_CASES:
        cmd = [sys.executable, str(HERE / "compressed_client.py"), "--server_host=127.0.0.1",
               f"--server_port={port}", f"--test_case={case}", f"--gen={gen}"]
        cmd += _tls_flags(certs) if transport == "tls" else ["--wire_check"]
        # --use_tls / --use_test_ca take no value in our client
        cmd = [c.replace("=true", "") if c.startswith("--use_") else c for c in cmd]
        return "own", cmd
    cmd = [str(client), "--server_host=127.0.0.1", f"--server_port={port}", f"--test_case={case}"]
    if transport == "tls":
        cmd += _tls_flags(certs)
    return "grpc-go", cmd


def run_command(cmd: List[str], timeout: float = CASE_TIMEOUT) -> Tuple[int, str]:
    env = dict(os.environ, GRPC_GO_LOG_SEVERITY_LEVEL="info", GRPC_GO_LOG_VERBOSITY_LEVEL="0")
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                              timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as err:
        out = (err.stdout or b"").decode("utf-8", "replace")
        return -1, out + f"\n[timed out after {timeout:.0f} s]"
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def _finished(kind: str, out: str) -> bool:
    """Whether the client says the case ran to its end (besides exiting 0):
    grpc-go's logs "<Case> done" at INFO, ours prints "PASS <case>"."""
    if kind == "grpc-go":
        return re.search(r"\[interop\] \w+ done", out) is not None
    return re.search(r"^PASS ", out, re.M) is not None


def run_group(impl: str, transport: str, cases: Sequence[str], client: pathlib.Path, work: pathlib.Path,
              gen: pathlib.Path, certs: Dict[str, pathlib.Path], log=print) -> List[Result]:
    results: List[Result] = []
    try:
        server = Server(impl, transport, work, gen, certs)
    except RuntimeError as err:
        return [Result(c, impl, transport, "FAIL", "-", output=str(err)) for c in cases]
    try:
        for case in cases:
            kind, cmd = client_command(case, server.port, transport, client, gen, certs)
            if not server.alive():
                results.append(Result(case, impl, transport, "FAIL", kind, output="server is no longer running",
                                      server_log=server.log_tail()))
                continue
            result = run_case(case, impl, transport, kind, cmd, server)
            if result.failed and server.alive():
                # Once more: a client's own race (grpc-go's cancel_after_begin
                # can read the server's answer before its own cancel, under
                # load, on grpcio's servers too) shouldn't fail the matrix; a
                # second pass is marked in the table, the first failure logged.
                again = run_case(case, impl, transport, kind, cmd, server)
                if not again.failed:
                    again.first_failure = result.output
                    log(f"  {impl} {transport} {case}: failed, then passed; the first run's client output:\n"
                        f"{_tail(result.output, 10)}")
                    result = again
            results.append(result)
            outcome, seconds = result.outcome, result.seconds
            log(f"  {impl:<10} {transport:<9} {case:<28} {outcome} ({seconds:.2f} s)")
    finally:
        rc = server.stop()
        if rc not in (0, None):
            log(f"  {impl} {transport}: server exited with {rc}")
    return results


def run_case(case: str, impl: str, transport: str, kind: str, cmd: List[str], server: "Server") -> Result:
    """Runs one case's client against server: its Result."""
    offset = server.log_size()
    started = time.monotonic()
    rc, out = run_command(cmd)
    seconds = time.monotonic() - started
    outcome = "pass" if rc == 0 and _finished(kind, out) else "FAIL"
    result = Result(case, impl, transport, outcome, kind, seconds, out)
    if outcome == "FAIL":
        time.sleep(0.2)  # let the server finish writing what it logs
        result.server_log = server.log_since(offset)
    return result


def run(impls: Sequence[str] = IMPLS, transports: Sequence[str] = TRANSPORTS, cases: Sequence[str] = ALL_CASES,
        work: Optional[pathlib.Path] = None, log=print) -> Tuple[List[Result], Dict[str, str]]:
    """Runs the matrix; returns the results and notes (name -> text)."""
    client = ensure_client(log)
    own_work = work is None
    work = pathlib.Path(work or tempfile.mkdtemp(prefix="interop_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        gen = protos.generate(work / "gen")
        certs = make_certs(work)
        results: List[Result] = []
        started = time.monotonic()
        for impl in impls:
            for transport in transports:
                results += run_group(impl, transport, cases, client, work, gen, certs, log)
        notes = {"elapsed": f"{time.monotonic() - started:.1f} s"}
        notes["client"] = f"{GO_PACKAGE}@{grpc_go_version()}"
        return results, notes
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)


# --- the matrix ---------------------------------------------------------------


def render(results: Sequence[Result], notes: Dict[str, str]) -> str:
    """A Markdown table, case x (server, transport), and its notes."""
    columns: List[Tuple[str, str]] = []
    for r in results:
        if (r.impl, r.transport) not in columns:
            columns.append((r.impl, r.transport))
    cases: List[str] = []
    for r in results:
        if r.case not in cases:
            cases.append(r.case)
    cases.sort(key=lambda c: ALL_CASES.index(c) if c in ALL_CASES else len(ALL_CASES))
    cell = {(r.case, r.impl, r.transport): r for r in results}

    def show(r: Optional[Result]) -> str:
        if r is None:
            return ""
        marks = ("1" if r.client == "own" else "") + ("2" if r.first_failure else "")
        return f"{r.outcome} ({', '.join(marks)})" if marks else r.outcome

    header = ["case"] + [f"{impl} {transport}" for impl, transport in columns]
    rows = [header, ["---"] * len(header)]
    for case in cases:
        rows.append([case] + [show(cell.get((case, i, t))) for i, t in columns])
    widths = [max(len(row[k]) for row in rows) for k in range(len(header))]
    lines = ["| " + " | ".join(v.ljust(w) if v != "---" else "-" * w for v, w in zip(row, widths)) + " |"
             for row in rows]
    passed = sum(r.outcome == "pass" for r in results)
    failed = sum(r.failed for r in results)
    lines += [
        "",
        f"{passed} passed, {failed} failed; client {notes.get('client', '?')}; {notes.get('elapsed', '?')}.",
        "",
        "(1) client_compressed_* and server_compressed_*: grpc-go's interop client doesn't implement these;",
        "    run with our own grpcio client (tests/interop/compressed_client.py), which sends gzip-compressed",
        "    requests, asks for compressed responses and, in plaintext, checks the compressed flag of each",
        "    message on the wire, both ways.",
        "(2) failed once, then passed when run again; the first run's client output is logged.",
    ]
    return "\n".join(lines)


def describe_failures(results: Sequence[Result]) -> str:
    parts = []
    for r in results:
        if not r.failed:
            continue
        parts.append(f"== {r.case} on {r.impl} {r.transport} ({r.client} client)\n--- client output\n"
                     f"{_tail(r.output)}")
        if r.server_log.strip():
            parts.append(f"--- server log during the case\n{r.server_log}")
    return "\n".join(parts)


def _tail(text: str, lines: int = 40) -> str:
    keep = text.splitlines()
    return "\n".join(keep if len(keep) <= lines else ["..."] + keep[-lines:])


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impls", default=",".join(IMPLS), help=f"comma-separated, of {', '.join(IMPLS)}")
    parser.add_argument("--transports", default=",".join(TRANSPORTS), help="comma-separated: plaintext,tls")
    parser.add_argument("--cases", default=",".join(ALL_CASES), help="comma-separated case names")
    parser.add_argument("--markdown", help="also write the matrix to this file")
    parser.add_argument("--work", help="keep the servers' logs, certificates and generated code here")
    args = parser.parse_args(argv)

    def names(value: str, allowed: Sequence[str], what: str) -> List[str]:
        chosen = [v for v in value.split(",") if v]
        unknown = [v for v in chosen if v not in allowed]
        if unknown:
            parser.error(f"unknown {what}: {', '.join(unknown)}")
        return chosen

    results, notes = run(names(args.impls, IMPLS, "server"), names(args.transports, TRANSPORTS, "transport"),
                         names(args.cases, ALL_CASES, "case"), pathlib.Path(args.work) if args.work else None)
    table = render(results, notes)
    print()
    print(table)
    if args.markdown:
        pathlib.Path(args.markdown).write_text(table + "\n")
    failures = describe_failures(results)
    if failures:
        print()
        print(failures)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
