"""grpc.ServicerContext for calls served by pygrpc_native.server().

A context is a view of its call's CallState (what the handler changes:
code, details, metadata, callbacks); everything about the call itself
(metadata, peer, deadline, whether it is still live) is asked of the Go
core when the handler asks. A context knows its call and nothing of the
server that runs it.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any, Callable, Dict, List, Mapping, NoReturn, Optional, Sequence, Tuple

import grpc

from ._call_state import CallState
from ._callbacks import CallbackRunner
from ._grpc_logs import SERVER_LOG
from ._grpcio_private import RpcEventView, RpcStateView

# What grpcio's invocation_metadata() items are: (key, value) named tuples,
# under grpcio's type name, so that they print the same.
Metadatum = collections.namedtuple("_Metadatum", ("key", "value"))

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


def refuse_ok_abort(code: Any, details: Any, log: logging.Logger = SERVER_LOG) -> Tuple[Any, Any]:
    """The status an abort(code, details) ends its call with. abort() with
    OK is a misuse that grpcio's sync server answers UNKNOWN with no
    details, and grpc.aio's leaves unanswered until the call's deadline:
    both servers here answer it as the sync one (README: known
    differences), and log it where each of grpcio's logs it (log)."""
    if code == grpc.StatusCode.OK:
        log.error("abort() called with StatusCode.OK; returning UNKNOWN")
        return grpc.StatusCode.UNKNOWN, ""
    return code, details


# grpc.Compression as the Go core names it.
_COMPRESSION_NAMES = {
    grpc.Compression.NoCompression: "",
    grpc.Compression.Deflate: "deflate",
    grpc.Compression.Gzip: "gzip",
}


def compression_name(compression: Any) -> str:
    """The Go core's name of a grpc.Compression ("" for none: None too, as
    grpcio's sync server takes it); ValueError for anything else."""
    if compression is None:
        return ""
    try:
        return _COMPRESSION_NAMES[compression]
    except (KeyError, TypeError):
        raise ValueError(f"compression must be a grpc.Compression, got {compression!r}") from None


def check_binary_values(metadata: Any) -> None:
    """grpcio's TypeError for initial metadata with a value other than bytes
    (a str, None, a bytearray) under a ``-bin`` key, raised where the
    handler sends it. (Trailing metadata with one fails in grpcio as its
    status is sent, and the call is never answered; ours sends a str's
    UTF-8 bytes: README.) Other mistakes are the core's to report, as is
    metadata that isn't a tuple or list."""
    if not isinstance(metadata, (tuple, list)):
        return
    for entry in metadata:
        if type(entry) is tuple and len(entry) == 2 and not isinstance(entry[1], bytes):
            key = entry[0]
            if isinstance(key, str) and len(key) > 4 and key.endswith("-bin"):
                raise TypeError(f'Binary metadata key="{key}" expected bytes, got {type(entry[1])}')


def with_empty_none_keys(metadata: Any) -> Optional[Tuple[Any, ...]]:
    """grpcio encodes a None key as an empty one, which no header may have
    (the call ends INTERNAL "Invalid metadata"); the front refuses None
    with TypeError. The metadata with such keys empty, or None where it
    has none (the TypeError was for something else). Error paths only."""
    if not isinstance(metadata, (tuple, list)):
        return None
    if not any(type(entry) is tuple and len(entry) == 2 and entry[0] is None for entry in metadata):
        return None
    return tuple(("", entry[1]) if type(entry) is tuple and len(entry) == 2 and entry[0] is None else entry for entry in metadata)


def as_grpcio_unpacks(error: TypeError, metadata: Any) -> Exception:
    """What grpcio raises for metadata the front refused for its shape or
    types (error). grpcio unpacks each entry into (key, value): the first
    entry that is a sequence of another length (a str, as a dict's keys
    are) makes it a ValueError; otherwise the TypeError stands. Error paths
    only."""
    if isinstance(metadata, (tuple, list, dict)):
        for entry in metadata:
            if isinstance(entry, (tuple, list)) and len(entry) == 2:
                if not all(isinstance(part, (str, bytes)) for part in entry):
                    break  # a pair of the wrong types: the TypeError
            elif isinstance(entry, (tuple, list, str, bytes)) and len(entry) != 2:
                return ValueError(str(error))
            else:
                break
    return error


def encode_details(details: Any) -> bytes:
    """grpcio keeps details as bytes; str is encoded as UTF-8. Anything else
    raises AttributeError where the handler set it, as grpcio's encode()
    does (its handler then fails with "Exception calling application")."""
    if isinstance(details, bytes):
        return details
    return details.encode("utf-8")


class CallInfo:
    """What a handler can read about its call, asked of the Go core on
    first use and kept: shared by the sync and aio contexts, whose ``_call``
    is their call."""

    __slots__ = ()

    _call: CallState

    def invocation_metadata(self) -> Tuple[Metadatum, ...]:
        return invocation_metadata_of(self._call)

    def peer(self) -> str:
        return self._call.call_details()["peer"]

    def peer_identities(self) -> Optional[Sequence[bytes]]:
        return peer_identities_of(self._call.call_details())

    def peer_identity_key(self) -> Optional[str]:
        return peer_identity_key_of(self._call.call_details())

    def auth_context(self) -> Mapping[str, Sequence[bytes]]:
        return auth_context_of(self._call.call_details())


def invocation_metadata_of(call: CallState) -> Tuple[Metadatum, ...]:
    """The call's metadata as grpcio's invocation_metadata() gives it."""
    return tuple(Metadatum(k, v) for k, v in call.call_details()["invocation_metadata"])


class SyncContextBase(CallInfo, grpc.ServicerContext):
    """grpcio's sync context, less what pygrpc_native.server() and the sync
    handlers of pygrpc_native.aio.server() do differently (sending,
    callbacks, the call's liveness), which subclasses add."""

    __slots__ = ("_call",)

    def __init__(self, call: CallState) -> None:
        self._call = call

    def send_initial_metadata(self, initial_metadata: Any) -> None:
        call = self._call
        if call.ended:
            self._initial_metadata_after_the_answer()
            return
        if not self.is_active():
            # As grpcio: the call is gone. The error is remembered so that, if
            # the handler lets it through, it isn't reported as the handler's.
            error = self._gone_error()
            call.gone_errors += (error,)
            raise error
        if call.initial_metadata_sent:
            self._initial_metadata_again()
        initial_metadata = initial_metadata or ()
        check_binary_values(initial_metadata)
        # Sent once Go took it: metadata refused for its shape or types
        # (TypeError, or ValueError as grpcio raises it) leaves nothing
        # sent, and the handler may send again, as on grpcio.
        try:
            self._send_initial_metadata(initial_metadata)
        except TypeError as err:
            raise as_grpcio_unpacks(err, initial_metadata) from None
        call.initial_metadata_sent = True

    def _send_initial_metadata(self, initial_metadata: Any) -> None:
        """Hands the metadata to Go. Where Go refuses its content (a key
        that isn't a header name, a value that isn't printable ASCII), Go
        ends the call INTERNAL "Invalid metadata" and this raises
        ValueError, which each server's context turns into what its grpcio
        counterpart does there."""
        call = self._call
        try:
            call.front.send_initial_metadata(call.call_id, initial_metadata)
        except TypeError:
            fixed = with_empty_none_keys(initial_metadata)
            if fixed is None:
                raise
            call.front.send_initial_metadata(call.call_id, fixed)  # refused for its content: ValueError

    def _gone_error(self) -> Exception:
        """What send_initial_metadata() raises once the call is gone."""
        return grpc.RpcError()

    def _initial_metadata_again(self) -> NoReturn:
        """send_initial_metadata() once the initial metadata went out."""
        raise ValueError("Initial metadata no longer allowed!")

    def _initial_metadata_after_the_answer(self) -> None:
        """send_initial_metadata() once the server has answered the call
        (from a thread the handler left running, or after metadata Go
        refused ended the call): grpcio's sync server ignores it, but
        refuses it at once where initial metadata went out already."""
        if self._call.initial_metadata_sent:
            self._initial_metadata_again()

    def trailing_metadata(self) -> Any:
        return self._call.trailing_metadata

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        code, details = refuse_ok_abort(code, details)
        call = self._call
        call.code = code
        call.details = encode_details(details)
        call.aborted = True
        # grpcio's abort() raises a bare Exception: handlers and interceptors
        # that catch, log or re-raise it see the same type and repr.
        raise Exception()

    def abort_with_status(self, status: grpc.Status) -> None:
        self._call.trailing_metadata = status.trailing_metadata
        self.abort(status.code, status.details)

    def set_code(self, code: grpc.StatusCode) -> None:
        self._call.code = code

    def code(self) -> Optional[grpc.StatusCode]:
        return self._call.code

    def set_details(self, details: str) -> None:
        self._call.details = encode_details(details)

    def details(self) -> Optional[bytes]:
        return self._call.details  # type: ignore[return-value]  # set_details() stores bytes


class ServicerContext(SyncContextBase):
    """The context handlers of pygrpc_native.server() receive."""

    __slots__ = ("_callbacks",)

    def __init__(self, call: CallState, callbacks: CallbackRunner) -> None:
        self._call = call
        self._callbacks = callbacks

    # grpcio's private attributes that libraries read (py-grpc-prometheus,
    # ddtrace, interceptors after the method's name): _grpcio_private.py.

    @property
    def _state(self) -> RpcStateView:
        return RpcStateView(self)

    @property
    def _rpc_event(self) -> RpcEventView:
        return RpcEventView(self)

    def _send_initial_metadata(self, initial_metadata: Any) -> None:
        # grpcio's sync server returns where Go refuses the metadata's
        # content (which ends the call INTERNAL "Invalid metadata"): the
        # handler runs on, answering an ended call.
        try:
            super()._send_initial_metadata(initial_metadata)
        except ValueError:
            self._call.ended = self._call.answered = True

    # Once the server has stopped, the front raises RuntimeError for every
    # call; for a handler that is just a call that has ended.

    def is_active(self) -> bool:
        call = self._call
        try:
            return not call.ended and call.front.is_active(call.call_id)
        except RuntimeError:
            return False

    def time_remaining(self) -> float:
        call = self._call
        try:
            left = call.time_remaining_kept(call.front.time_remaining(call.call_id))
        except RuntimeError:
            left = call.time_remaining_kept(0.0)
        if left is None:
            return max(_NO_DEADLINE - time.time(), 0)
        return left

    def cancel(self) -> None:
        call = self._call
        try:
            call.front.cancel(call.call_id)
        except RuntimeError:
            pass
        self._callbacks.call_ended(call)

    def add_callback(self, callback: Callable[[], None]) -> bool:
        call = self._call
        callbacks = call.callbacks
        if callbacks is None or call.ended:
            return False
        if callbacks:
            callbacks.append(callback)  # type: ignore[union-attr]  # a list once not empty
            return True
        # The first callback: in place before the call is watched, so that
        # an end reported at once finds it; the call's details are kept for
        # the callbacks to read.
        call.keep_details()
        call.callbacks = [callback]
        if not self._callbacks.watch(call):
            call.callbacks = ()
            return False  # the call has already ended
        return True

    # -- what the handler sends ----------------------------------------------

    def set_trailing_metadata(self, trailing_metadata: Any) -> None:
        self._call.trailing_metadata = trailing_metadata

    def set_compression(self, compression: grpc.Compression) -> None:
        """Compresses this call's responses, as grpcio: only if the initial
        metadata hasn't been sent yet, and NoCompression changes nothing
        (the server's default stays)."""
        name = compression_name(compression)
        if not name:
            return
        call = self._call
        try:
            call.front.set_compression(call.call_id, name)
        except RuntimeError:
            pass  # the server has stopped: the call has ended

    def disable_next_message_compression(self) -> None:
        call = self._call
        try:
            call.front.disable_next_message_compression(call.call_id)
        except RuntimeError:
            pass  # the server has stopped: the call has ended
