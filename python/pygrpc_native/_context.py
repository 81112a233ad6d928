"""grpc.ServicerContext for calls served by pygrpc_native.server().

One context per call, holding only what the handler changes (code, details,
metadata, callbacks); everything about the call itself (metadata, peer,
deadline, whether it is still live) is asked of the Go core when the handler
asks, so an untouched context costs one small object.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import grpc

if TYPE_CHECKING:  # pragma: no cover
    from ._server import _Server

_LOGGER = logging.getLogger("pygrpc_native")

# What grpcio's invocation_metadata() items are: (key, value) named tuples.
Metadatum = collections.namedtuple("Metadatum", ("key", "value"))

# grpcio reports a call without a deadline as ending at 2**63 seconds.
_NO_DEADLINE = float(2**63)

INSECURE_AUTH_CONTEXT: Mapping[str, Sequence[bytes]] = {
    "transport_security_type": [b"insecure"],
    "security_level": [b"TSI_SECURITY_NONE"],
}


def auth_context_of(details: Mapping[str, Any]) -> Dict[str, List[bytes]]:
    """auth_context() from a call's call_details(): grpcio's keys for TLS
    connections, the insecure values otherwise (and once the call ended)."""
    auth = details.get("auth_context") or INSECURE_AUTH_CONTEXT
    return {k: list(v) for k, v in auth.items()}


def peer_identity_key_of(details: Mapping[str, Any]) -> Optional[str]:
    """peer_identity_key() from call_details(): None without a client
    certificate."""
    return details.get("peer_identity_key")


def peer_identities_of(details: Mapping[str, Any]) -> Optional[List[bytes]]:
    """peer_identities() from call_details(): the values of the identity key."""
    key = details.get("peer_identity_key")
    if key is None:
        return None
    return list(details["auth_context"][key])


class AbortError(Exception):
    """Raised by abort(); like grpcio's, it carries no message of its own."""


# grpc.Compression as the Go core names it.
_COMPRESSION_NAMES = {
    grpc.Compression.NoCompression: "",
    grpc.Compression.Deflate: "deflate",
    grpc.Compression.Gzip: "gzip",
}


def compression_name(compression: Any) -> str:
    """The Go core's name of a grpc.Compression; ValueError for anything
    else."""
    try:
        return _COMPRESSION_NAMES[compression]
    except (KeyError, TypeError):
        raise ValueError(f"compression must be a grpc.Compression, got {compression!r}") from None


def encode_details(details: Any) -> bytes:
    """grpcio keeps details as bytes; str is encoded as UTF-8."""
    if isinstance(details, bytes):
        return details
    return str(details).encode("utf-8")


class CallInfo:
    """What a handler can read about its call, asked of the Go core on
    first use and kept: shared by the sync and aio contexts, which set
    ``_front``, ``_call_id`` and ``_details_cache``."""

    _front: Any
    _call_id: int
    _details_cache: Optional[Dict[str, Any]]

    def _call_details(self) -> Dict[str, Any]:
        if self._details_cache is None:
            try:
                self._details_cache = self._front.call_details(self._call_id)
            except (LookupError, RuntimeError):
                # The call has ended; what grpcio would still report.
                self._details_cache = {"invocation_metadata": (), "peer": ""}
        return self._details_cache

    def invocation_metadata(self) -> Tuple[Metadatum, ...]:
        return tuple(Metadatum(k, v) for k, v in self._call_details()["invocation_metadata"])

    def peer(self) -> str:
        return self._call_details()["peer"]

    def peer_identities(self) -> Optional[Sequence[bytes]]:
        return peer_identities_of(self._call_details())

    def peer_identity_key(self) -> Optional[str]:
        return peer_identity_key_of(self._call_details())

    def auth_context(self) -> Mapping[str, Sequence[bytes]]:
        return auth_context_of(self._call_details())


class ServicerContext(CallInfo, grpc.ServicerContext):
    """The context handlers of pygrpc_native.server() receive."""

    def __init__(self, server: "_Server", call_id: int, method: str) -> None:
        self._server = server
        self._front = server.front
        self._call_id = call_id
        self._method = method
        self._details_cache: Optional[Dict[str, Any]] = None
        self.code_: Optional[grpc.StatusCode] = None
        self.details_: Optional[bytes] = None
        self.trailing_metadata_: Any = None
        self.aborted = False
        self.initial_metadata_allowed = True
        self.callbacks: Optional[List[Callable[[], None]]] = []
        self.finished = False
        self.rpc_errors: Tuple[grpc.RpcError, ...] = ()

    # Once the server has stopped, the front raises RuntimeError for every
    # call; for a handler that is just a call that has ended.

    def is_active(self) -> bool:
        try:
            return not self.finished and self._server.front.is_active(self._call_id)
        except RuntimeError:
            return False

    def time_remaining(self) -> float:
        try:
            left = self._server.front.time_remaining(self._call_id)
        except RuntimeError:
            return 0.0
        if left is None:
            return max(_NO_DEADLINE - time.time(), 0)
        return left

    def cancel(self) -> None:
        try:
            self._server.front.cancel(self._call_id)
        except RuntimeError:
            pass
        self._server.run_callbacks(self)

    def add_callback(self, callback: Callable[[], None]) -> bool:
        if self.callbacks is None or self.finished:
            return False
        if not self.callbacks and not self._server.watch(self):
            return False  # the call has already ended
        self.callbacks.append(callback)
        return True

    # -- what the handler sends ----------------------------------------------

    def send_initial_metadata(self, initial_metadata: Any) -> None:
        if not self.is_active():
            # As grpcio: the call is gone. The error is remembered so that, if
            # the handler lets it through, it isn't reported as the handler's.
            error = grpc.RpcError()
            self.rpc_errors += (error,)
            raise error
        if not self.initial_metadata_allowed:
            raise ValueError("Initial metadata no longer allowed!")
        self.initial_metadata_allowed = False
        self._server.front.send_initial_metadata(self._call_id, initial_metadata or ())

    def set_trailing_metadata(self, trailing_metadata: Any) -> None:
        self.trailing_metadata_ = trailing_metadata

    def trailing_metadata(self) -> Any:
        return self.trailing_metadata_

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        if code == grpc.StatusCode.OK:
            _LOGGER.error("abort() called with StatusCode.OK; returning UNKNOWN")
            code, details = grpc.StatusCode.UNKNOWN, ""
        self.code_ = code
        self.details_ = encode_details(details)
        self.aborted = True
        raise AbortError()

    def abort_with_status(self, status: grpc.Status) -> None:
        self.trailing_metadata_ = status.trailing_metadata
        self.abort(status.code, status.details)

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code_ = code

    def code(self) -> Optional[grpc.StatusCode]:
        return self.code_

    def set_details(self, details: str) -> None:
        self.details_ = encode_details(details)

    def details(self) -> Optional[bytes]:
        return self.details_

    def set_compression(self, compression: grpc.Compression) -> None:
        """Compresses this call's responses, as grpcio: only if the initial
        metadata hasn't been sent yet, and NoCompression changes nothing
        (the server's default stays)."""
        name = compression_name(compression)
        if not name:
            return
        try:
            self._server.front.set_compression(self._call_id, name)
        except RuntimeError:
            pass  # the server has stopped: the call has ended

    def disable_next_message_compression(self) -> None:
        try:
            self._server.front.disable_next_message_compression(self._call_id)
        except RuntimeError:
            pass  # the server has stopped: the call has ended
