"""TLS credentials: pygrpc_native.ssl_server_credentials().

grpcio's ServerCredentials can't be read back (the PEM disappears into
grpc-core), so servers of pygrpc_native take credentials made here. They
are checked by the Go core when they are made: a key that doesn't parse or
doesn't match its certificate, or root certificates that can't be read, are
a ValueError here rather than a failed handshake later. See docs/tls.md.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Dict, Optional, Sequence, Tuple

import grpc

from . import _native

__all__ = ["ServerCredentials", "ssl_server_credentials"]


class ServerCredentials(grpc.ServerCredentials):
    """TLS credentials for pygrpc_native's servers and NativeGrpcFront.

    Made by :func:`ssl_server_credentials`. It is also a complete
    ``grpc.ServerCredentials`` (it carries grpcio's credentials for the same
    PEM), so ``grpc.server().add_secure_port()`` accepts it too.
    """

    def __init__(
        self,
        private_key: bytes,
        certificate_chain: bytes,
        root_certificates: Optional[bytes],
        require_client_auth: bool,
    ) -> None:
        self.private_key = private_key
        self.certificate_chain = certificate_chain
        self.root_certificates = root_certificates
        self.require_client_auth = require_client_auth
        self._tls: Dict[str, Any] = {
            "key": _b64(private_key),
            "chain": _b64(certificate_chain),
            "roots": None if root_certificates is None else _b64(root_certificates),
            "require_client_auth": require_client_auth,
        }
        self._tls_json = json.dumps(self._tls)
        _native.check_tls(self._tls_json)
        grpcio_credentials = grpc.ssl_server_credentials(
            [(private_key, certificate_chain)], root_certificates, require_client_auth
        )
        super().__init__(grpcio_credentials._credentials)

    def __repr__(self) -> str:
        auth = "required" if self.require_client_auth else "not requested"
        return f"<pygrpc_native.ServerCredentials client certificates {auth}>"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _pem(value: Any, what: str) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"{what} must be PEM-encoded bytes, not {type(value).__name__}")
    return value


def ssl_server_credentials(
    private_key_certificate_chain_pairs: Sequence[Tuple[bytes, bytes]],
    root_certificates: Optional[bytes] = None,
    require_client_auth: bool = False,
) -> ServerCredentials:
    """Creates TLS credentials, as grpc.ssl_server_credentials() does.

    Args:
      private_key_certificate_chain_pairs: one ``(private_key,
        certificate_chain)`` pair of PEM bytes. pygrpc_native serves one
        certificate, so more than one pair is a ValueError.
      root_certificates: PEM bytes of the CA certificates that verify client
        certificates, or None.
      require_client_auth: refuse clients without a certificate signed by
        ``root_certificates`` during the handshake. Needs root_certificates.
        When False, no client certificate is asked for, as in grpcio.

    Raises:
      ValueError: the PEM can't be read, the key doesn't match the
        certificate, or the arguments ask for what grpcio refuses too.
      TypeError: PEM that isn't bytes.
    """
    if not private_key_certificate_chain_pairs:
        raise ValueError("At least one private key-certificate chain pair is required!")
    if require_client_auth and root_certificates is None:
        raise ValueError("Illegal to require client auth without providing root certificates!")
    pairs = list(private_key_certificate_chain_pairs)
    if len(pairs) != 1:
        raise ValueError(
            f"pygrpc_native serves one private key and certificate chain; got {len(pairs)} pairs "
            "(choosing a certificate per client is not supported)"
        )
    pair = pairs[0]
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise TypeError(f"private_key_certificate_chain_pairs must hold (private_key, certificate_chain) pairs, got {pair!r}")
    key = _pem(pair[0], "the private key")
    chain = _pem(pair[1], "the certificate chain")
    roots = None if root_certificates is None else _pem(root_certificates, "root_certificates")
    return ServerCredentials(key, chain, roots, bool(require_client_auth))


def tls_config(credentials: Any, where: str) -> Optional[Dict[str, Any]]:
    """The "tls" member of a NativeGrpcFront configuration for credentials
    given to ``where`` (None: no TLS). grpcio's own credentials are a
    TypeError that says what to use instead."""
    if credentials is None:
        return None
    if isinstance(credentials, ServerCredentials):
        return credentials._tls
    if isinstance(credentials, grpc.ServerCredentials):
        raise TypeError(
            f"{where} needs credentials from pygrpc_native.ssl_server_credentials(), not "
            "grpc.ssl_server_credentials(): grpcio's credentials can't be read back. "
            "Make them with pygrpc_native.ssl_server_credentials() (same arguments)."
        )
    raise TypeError(
        f"{where} needs credentials from pygrpc_native.ssl_server_credentials(), not {type(credentials).__name__}"
    )


def set_front_tls(front: Any, credentials: Any, where: str = "add_secure_port()") -> None:
    """Gives a front, before it starts, the credentials of add_secure_port()
    (None: back to plaintext). For server() and aio.server()."""
    front._set_tls(json.dumps(tls_config(credentials, where)))
