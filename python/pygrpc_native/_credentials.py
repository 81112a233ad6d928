"""Server credentials: grpcio's, as pygrpc_native reads them, and its own.

grpcio's ServerCredentials can't be read back: the PEM disappears into
grpc-core. So when pygrpc_native is imported it wraps grpcio's credential
factories (``grpc.ssl_server_credentials``,
``grpc.ssl_server_certificate_configuration``,
``grpc.dynamic_ssl_server_credentials``, ``grpc.local_server_credentials``,
``grpc.insecure_server_credentials``, and, to refuse them clearly,
``grpc.xds_server_credentials`` and ``grpc.alts_server_credentials``):
each wrapper calls grpcio's factory, returns grpcio's own object unchanged
(so it keeps working on ``grpc.server()``), and remembers the arguments it
was made from, keyed weakly by that object. Credentials made before the import, or by a factory
that isn't wrapped, are unknown and get an error that says so.

``pygrpc_native.ssl_server_credentials()`` makes credentials too, and
``ssl_server_credentials_from_files()`` credentials that follow files on
disk. Key material is checked by the Go core when it is given to a server
(or, for pygrpc_native's own, when it is made). See docs/tls.md.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import sys
import weakref
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import grpc

from . import _tls_fetch

__all__ = ["ServerCredentials", "ssl_server_credentials", "ssl_server_credentials_from_files"]

# What each grpcio credentials object (and ServerCertificateConfiguration)
# made since the import was made from: its "tls" JSON member, or, for
# objects pygrpc_native can't serve, the reason as a string.
_remembered: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


class ServerCredentials(grpc.ServerCredentials):
    """TLS credentials for pygrpc_native's servers and NativeGrpcFront.

    Made by :func:`ssl_server_credentials` or
    :func:`ssl_server_credentials_from_files`. It is also a complete
    ``grpc.ServerCredentials`` (it carries grpcio's credentials for the same
    PEM; for files, as they were when it was made), so
    ``grpc.server().add_secure_port()`` accepts it too.
    """

    def __init__(
        self,
        private_key: bytes,
        certificate_chain: bytes,
        root_certificates: Optional[bytes],
        require_client_auth: bool,
        *,
        tls: Optional[Dict[str, Any]] = None,
    ) -> None:
        self.private_key = private_key
        self.certificate_chain = certificate_chain
        self.root_certificates = root_certificates
        self.require_client_auth = require_client_auth
        if tls is None:
            tls = _material([(private_key, certificate_chain)], root_certificates)
            tls["require_client_auth"] = require_client_auth
        self._tls = tls
        self._tls_json = json.dumps(tls)
        # The compiled core checks the key material; loading it here (not
        # with this module) keeps importing pygrpc_native free of the Go
        # runtime until something needs it (README: fork).
        from . import _native

        _native.check_tls(self._tls_json)
        grpcio_credentials = _ORIGINAL["ssl_server_credentials"](
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


def _roots(value: Any) -> Optional[bytes]:
    """root_certificates as bytes: grpcio takes them as str too (encoded as
    UTF-8), but its key pairs only as bytes."""
    if isinstance(value, str):
        return value.encode("utf-8")
    return None if value is None else _pem(value, "root_certificates")


def _pairs(pairs: Any) -> list:
    out = []
    for pair in pairs if pairs else ():
        try:
            key, chain = pair  # as grpcio reads them: anything that unpacks into two
        except (TypeError, ValueError):
            # Named by type only: the value may hold a private key.
            raise TypeError(
                "private_key_certificate_chain_pairs must hold (private_key, certificate_chain) pairs, "
                f"got a {type(pair).__name__}" + (f" of {len(pair)}" if isinstance(pair, (tuple, list)) else "")
            ) from None
        out.append((_pem(key, "the private key"), _pem(chain, "the certificate chain")))
    if not out:
        raise ValueError("At least one private key-certificate chain pair is required!")
    return out


def _is_iterator(value: Any) -> bool:
    try:
        return iter(value) is value
    except TypeError:
        return False


def _read_once(pairs: Any) -> Any:
    """Pairs given as an iterator (zip(), a generator), or pairs that are
    iterators themselves, read into lists and tuples that grpcio's factory
    and describe() can both read; an empty iterator stays one, which
    grpcio's factory takes as it would have."""
    if _is_iterator(pairs):
        pairs = list(pairs)
        if not pairs:
            return iter(())
    elif not isinstance(pairs, (list, tuple)):
        return pairs  # not iterable, or a sequence of another kind: as given
    if any(_is_iterator(pair) for pair in pairs):
        pairs = [tuple(pair) if _is_iterator(pair) else pair for pair in pairs]
    return pairs


def _material(pairs: Sequence[Tuple[bytes, bytes]], roots: Optional[bytes]) -> Dict[str, Any]:
    """Key material as the Go core reads it: {"pairs": ..., "roots": ...}."""
    return {
        "pairs": [[_b64(key), _b64(chain)] for key, chain in pairs],
        "roots": None if roots is None else _b64(roots),
    }


def ssl_server_credentials(
    private_key_certificate_chain_pairs: Sequence[Tuple[bytes, bytes]],
    root_certificates: Optional[bytes] = None,
    require_client_auth: bool = False,
) -> ServerCredentials:
    """Creates TLS credentials, as grpc.ssl_server_credentials() does, and
    checks them at once (grpc.ssl_server_credentials() works as well).

    Args:
      private_key_certificate_chain_pairs: ``(private_key,
        certificate_chain)`` pairs of PEM bytes. With several, each client
        gets the first whose certificate is valid for the name it asks for
        (SNI), else the first, as grpcio chooses.
      root_certificates: PEM bytes of the CA certificates that verify client
        certificates, or None.
      require_client_auth: refuse clients without a certificate signed by
        ``root_certificates`` during the handshake. Needs root_certificates.
        When False, no client certificate is asked for, as in grpcio.

    Raises:
      ValueError: the PEM can't be read, a key doesn't match its
        certificate, or the arguments ask for what grpcio refuses too.
      TypeError: PEM that isn't bytes.
    """
    if require_client_auth and root_certificates is None:
        raise ValueError("Illegal to require client auth without providing root certificates!")
    pairs = _pairs(private_key_certificate_chain_pairs)
    roots = _roots(root_certificates)
    tls = _material(pairs, roots)
    tls["require_client_auth"] = bool(require_client_auth)
    key, chain = pairs[0]
    return ServerCredentials(key, chain, roots, bool(require_client_auth), tls=tls)


def ssl_server_credentials_from_files(
    private_key_path: str,
    certificate_chain_path: str,
    root_certificates_path: Optional[str] = None,
    require_client_auth: bool = False,
) -> ServerCredentials:
    """TLS credentials read from files and read again when they change, so
    a renewed certificate is served without a restart or any code.

    The files are followed through symlinks, so a Kubernetes secret volume
    (whose ``..data`` directory link is swapped on update) works as mounted.
    pygrpc_native's servers check the files at most once a second, when a
    client connects; a new key and chain are taken together and only when
    they match, and an update that can't be used is logged and the current
    credentials stay. Connections already made keep their certificate.
    On ``grpc.server()`` these credentials serve the files as they were when
    they were made.

    Raises:
      ValueError: the files can't be read or don't hold usable credentials.
    """
    if require_client_auth and root_certificates_path is None:
        raise ValueError("Illegal to require client auth without providing root certificates!")
    paths = {"key": private_key_path, "chain": certificate_chain_path, "roots": root_certificates_path or ""}
    for what, path in paths.items():
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"the {what} path must be a str, not {type(path).__name__}")
    paths = {k: os.fspath(v) for k, v in paths.items()}

    def read(path: str, what: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as err:
            raise ValueError(f"cannot read the {what}: {err}") from err

    key = read(paths["key"], "private key")
    chain = read(paths["chain"], "certificate chain")
    roots = read(paths["roots"], "root certificates") if paths["roots"] else None
    tls = {"files": paths, "require_client_auth": bool(require_client_auth)}
    return ServerCredentials(key, chain, roots, bool(require_client_auth), tls=tls)


# --- grpcio's factories, remembered -----------------------------------------

_ORIGINAL: Dict[str, Callable[..., Any]] = {}

# The key pairs' argument name, in the factories that take key pairs first.
_PAIRS = "private_key_certificate_chain_pairs"


def _remembering(name: str, describe: Callable[..., Any], takes_pairs: bool = False) -> Callable[..., Any]:
    """grpcio's factory ``name``, which also remembers what describe()
    makes of its arguments. grpcio's factory runs first, so arguments
    grpcio refuses are refused by grpcio, with grpcio's error; arguments it
    takes and pygrpc_native can't serve are remembered as the reason, for
    add_secure_port() to give. Nothing here can make grpcio's factory
    fail."""
    original = getattr(grpc, name)
    _ORIGINAL[name] = original

    @functools.wraps(original)
    def factory(*args: Any, **kwargs: Any) -> Any:
        if takes_pairs and args:
            args = (_read_once(args[0]),) + args[1:]
        elif takes_pairs and _PAIRS in kwargs:
            kwargs[_PAIRS] = _read_once(kwargs[_PAIRS])
        made = original(*args, **kwargs)
        try:
            description = describe(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - grpcio's factory must keep working
            description = f"pygrpc_native can't serve them: {err}"
        _remembered[made] = description
        if isinstance(description, dict) and "fetch" in description:
            # The fetcher lives as long as these credentials (a server that
            # serves them holds them: hold_credentials).
            weakref.finalize(made, _tls_fetch.forget, description["fetch"])
        return made

    factory.__pygrpc_native_wrapped__ = True  # type: ignore[attr-defined]
    return factory


def _describe_ssl(
    private_key_certificate_chain_pairs: Any, root_certificates: Any = None, require_client_auth: bool = False
) -> Dict[str, Any]:
    tls = _material(_pairs(private_key_certificate_chain_pairs), _roots(root_certificates))
    tls["require_client_auth"] = bool(require_client_auth)
    return tls


def _describe_certificate_configuration(
    private_key_certificate_chain_pairs: Any, root_certificates: Any = None
) -> Dict[str, Any]:
    return _material(_pairs(private_key_certificate_chain_pairs), _roots(root_certificates))


def _describe_dynamic(
    initial_certificate_configuration: Any,
    certificate_configuration_fetcher: Any,
    require_client_authentication: bool = False,
) -> Dict[str, Any]:
    initial = _lookup(initial_certificate_configuration)
    if not isinstance(initial, dict):
        raise ValueError(
            "the initial configuration was not made by grpc.ssl_server_certificate_configuration() "
            "after pygrpc_native was imported"
        )
    tls = dict(initial)
    tls["require_client_auth"] = bool(require_client_authentication)
    tls["fetch"] = _tls_fetch.register(certificate_configuration_fetcher, material_json)
    return tls


def _describe_local(local_connect_type: Any = grpc.LocalConnectionType.LOCAL_TCP) -> Dict[str, Any]:
    if local_connect_type == grpc.LocalConnectionType.UDS:
        return {"local": "uds"}
    if local_connect_type == grpc.LocalConnectionType.LOCAL_TCP:
        return {"local": "tcp"}
    raise ValueError(f"unknown local connection type {local_connect_type!r}")


# What grpc.insecure_server_credentials() is remembered as: a plaintext
# port, as grpcio serves it on add_secure_port().
_PLAINTEXT = object()


def _describe_insecure() -> object:
    return _PLAINTEXT


def _describe_alts(*args: Any, **kwargs: Any) -> str:
    return "ALTS credentials need Google's ALTS handshaker service, which pygrpc_native does not talk to"


def _describe_xds(*args: Any, **kwargs: Any) -> str:
    return (
        "xDS credentials need an xDS control plane, which pygrpc_native does not talk to; "
        "serve xDS with grpc.server(xds=True), or pass TLS or local credentials"
    )


def install() -> None:
    """Wraps grpcio's credential factories (once; pygrpc_native's import
    does it)."""
    if getattr(grpc.ssl_server_credentials, "__pygrpc_native_wrapped__", False):
        return
    grpc.ssl_server_credentials = _remembering("ssl_server_credentials", _describe_ssl, takes_pairs=True)
    grpc.ssl_server_certificate_configuration = _remembering(
        "ssl_server_certificate_configuration", _describe_certificate_configuration, takes_pairs=True
    )
    grpc.dynamic_ssl_server_credentials = _remembering("dynamic_ssl_server_credentials", _describe_dynamic)
    grpc.local_server_credentials = _remembering("local_server_credentials", _describe_local)
    grpc.xds_server_credentials = _remembering("xds_server_credentials", _describe_xds)
    grpc.insecure_server_credentials = _remembering("insecure_server_credentials", _describe_insecure)
    grpc.alts_server_credentials = _remembering("alts_server_credentials", _describe_alts)
    # grpcio's own alias, bound when grpc.beta.implementations was imported:
    # rebound if that happened before this import (the module takes
    # grpc's factory at its own import otherwise).
    beta = sys.modules.get("grpc.beta.implementations")
    if beta is not None and getattr(beta, "ssl_server_credentials", None) is _ORIGINAL["ssl_server_credentials"]:
        beta.ssl_server_credentials = grpc.ssl_server_credentials


def _lookup(made: Any) -> Any:
    """What made was made from (see _remembered); None if unknown."""
    try:
        return _remembered.get(made)
    except TypeError:  # not weakly referenceable: not made by grpcio
        return None


def material_json(configuration: Any) -> Optional[str]:
    """The key material of a ServerCertificateConfiguration a fetcher
    returned, as the Go core reads it; None for one pygrpc_native can't
    read (the caller logs it)."""
    material = _lookup(configuration)
    return json.dumps(material) if isinstance(material, dict) else None


def tls_config(credentials: Any, where: str) -> Optional[Dict[str, Any]]:
    """The "tls" member of a NativeGrpcFront configuration for credentials
    given to ``where`` (None: no TLS). Credentials pygrpc_native can't read
    are a TypeError that says why and what to do."""
    if credentials is None:
        return None
    if isinstance(credentials, ServerCredentials):
        return credentials._tls
    remembered = _lookup(credentials)
    if remembered is _PLAINTEXT:
        return None
    if isinstance(remembered, dict):
        if "fetch" in remembered:
            _tls_fetch.start()
        return remembered
    if isinstance(remembered, str):
        raise TypeError(f"{where}: these credentials can't be used: {remembered}")
    if isinstance(credentials, grpc.ServerCredentials):
        raise TypeError(
            f"{where} can't read these grpcio credentials: grpcio keeps their key inside its C core, so "
            "pygrpc_native remembers what grpc.ssl_server_credentials() and the other factories were given, "
            "but only for credentials made after pygrpc_native was imported (through grpc.<factory>, not a "
            "name imported from grpc earlier). Import pygrpc_native first, or make them with "
            "pygrpc_native.ssl_server_credentials() (same arguments)."
        )
    raise TypeError(
        f"{where} needs server credentials such as grpc.ssl_server_credentials(), not {type(credentials).__name__}"
    )


def hold_credentials(front: Any, credentials: Any) -> None:
    """Keeps credentials a front serves alive as long as the front: the
    fetcher of grpc.dynamic_ssl_server_credentials() is forgotten when its
    credentials object goes, as grpcio's server holds its credentials."""
    if credentials is not None:
        front.__dict__.setdefault("_credentials_served", []).append(credentials)


def set_front_tls(front: Any, credentials: Any, where: str = "add_secure_port()") -> None:
    """Gives a front, before it starts, the credentials of add_secure_port()
    (None: back to plaintext). For server() and aio.server()."""
    front._set_tls(json.dumps(tls_config(credentials, where)))
    hold_credentials(front, credentials)


def update_front_tls(front: Any, configuration: Any) -> None:
    """Replaces the key material of a running front's TLS ports
    (NativeGrpcFront.update_credentials)."""
    if isinstance(configuration, ServerCredentials):
        material = {k: v for k, v in configuration._tls.items() if k in ("pairs", "roots")}
        if "pairs" not in material:
            raise TypeError("credentials that follow files can't be swapped in; they rotate by themselves")
        front._update_tls(json.dumps(material))
        return
    doc = material_json(configuration)
    if doc is None:
        raise TypeError(
            "update_credentials() takes pygrpc_native.ssl_server_credentials() or "
            "grpc.ssl_server_certificate_configuration() made after pygrpc_native was imported"
        )
    front._update_tls(doc)


install()
