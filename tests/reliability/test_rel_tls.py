"""TLS: a plaintext client, a ClientHello of random bytes, an untrusted
client certificate and none at all, against a mutual-TLS port: each is
turned away as grpcio's servers turn it away, and a trusted client is then
served."""

import pytest
from harness import CONTROL_OF, TRANSPORT, ServerProcess, record
from probes import tls_garbage, write_tls_files
from tls_certs import make_pki

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def pki_dir(tmp_path_factory):
    pki = make_pki()
    return pki, write_tls_files(pki, tmp_path_factory.mktemp("tls"))


@pytest.mark.parametrize("kind", ["server", "aio"])
def test_bad_tls_clients_are_turned_away_as_grpcio_does(kind, pki_dir):
    pki, directory = pki_dir
    with ServerProcess(kind, tls_dir=directory) as server:
        ours = tls_garbage(server, pki)
        record("TLS", server, ours)
    with ServerProcess(CONTROL_OF[kind], tls_dir=directory) as control:
        theirs = tls_garbage(control, pki)
        record("TLS", control, theirs)
    assert ours["trusted client"] == "OK" and ours["alive"], (TRANSPORT, ours)
    codes = ("untrusted client certificate", "no client certificate")
    assert {k: ours[k] for k in codes} == {k: theirs[k] for k in codes}
    for k in ("plaintext HTTP/2", "random ClientHello"):
        assert ours[k] in ("closed", "TLS alert", "ConnectionResetError"), ours
