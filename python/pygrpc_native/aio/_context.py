"""grpc.aio.ServicerContext for calls served by pygrpc_native.aio.server().

The call's outcome is sent as soon as it is known (``abort`` sends it at
once, as grpc.aio does); everything about the call itself is asked of the Go
core on demand, like the sync context.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, List, NoReturn, Optional

import grpc
import grpc.aio

from .._context import CallInfo, compression_name

if TYPE_CHECKING:  # pragma: no cover
    from ._server import _AioServer

_CODE_VALUES = {code: code.value[0] for code in grpc.StatusCode}
_UNKNOWN = grpc.StatusCode.UNKNOWN
_METADATA_SHAPE = "Tuple[Tuple[str, Union[str, bytes]]...]"


def check_trailing_metadata(metadata: Any) -> None:
    """grpc.aio's check of trailing metadata, with its TypeError, so that a
    handler learns of the mistake where it made it: an iterable (not a
    dict) of (str, str | bytes) tuples. Unlike initial metadata, keys given
    as bytes are refused, as grpc.aio refuses them."""
    if (
        not hasattr(metadata, "__iter__")
        or isinstance(metadata, dict)
        or not all(
            isinstance(item, tuple)
            and len(item) == 2
            and isinstance(item[0], str)
            and isinstance(item[1], (str, bytes))
            for item in metadata
        )
    ):
        raise TypeError(f"Invalid trailing metadata type, expected {_METADATA_SHAPE}: {metadata}")


class ServicerContext(CallInfo, grpc.aio.ServicerContext):
    """The context coroutine handlers of pygrpc_native.aio.server() get."""

    def __init__(self, server: "_AioServer", call_id: int, method: str) -> None:
        self._server = server
        self._front = server.front
        self._call_id = call_id
        self._method = method
        self._details_cache: Optional[dict] = None
        self.code_: Optional[grpc.StatusCode] = None
        self.details_: str = ""
        self.trailing_metadata_: Any = ()
        self.initial_metadata_sent = False
        self.status_sent = False
        self.aborted = False
        self.done_callbacks: List[Callable[[Any], None]] = []
        self.serializer: Optional[Callable[[Any], bytes]] = None
        # A set_compression() / disable_next_message_compression() that
        # found the call's buffer full; sent before the next op.
        self.compression_pending: Optional[str] = None
        self.uncompressed_next_pending = False

    # -- sending ---------------------------------------------------------------

    def _send_now(self, send: Callable[..., Optional[bool]], *args: Any) -> Optional[bool]:
        """Hands an op to Go when that needs no await (the usual case): None
        when the call's buffer is full or a compression change still waits
        to go first, and then _post must send it."""
        if self.compression_pending is not None or self.uncompressed_next_pending:
            return None
        try:
            return send(self._call_id, *args)
        except RuntimeError:
            return False  # the server has stopped: the call has ended

    async def _post(self, send: Callable[..., Optional[bool]], *args: Any) -> bool:
        """Hands an op to Go without blocking the loop: a full call buffer
        (a slow client) is waited out here, not in Go."""
        if self.compression_pending is not None:
            name, self.compression_pending = self.compression_pending, None
            await self._post(self._front.set_compression, name)
        if self.uncompressed_next_pending:
            self.uncompressed_next_pending = False
            await self._post(self._front.disable_next_message_compression)
        delay = 0.0005
        try:
            while (ok := send(self._call_id, *args)) is None:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.02)
        except RuntimeError:
            return False  # the server has stopped: the call has ended
        return ok

    async def finish(self, code: Any, details: str, payload: Optional[bytes] = None) -> None:
        """Sends the status (once). ``code`` is an int or grpc.StatusCode."""
        if self.status_sent:
            return
        self.status_sent = True
        value = code if isinstance(code, int) else _CODE_VALUES.get(code, 2)
        front = self._front
        metadata = self.trailing_metadata_ or None
        try:
            if value == 0 and payload is not None and not details and metadata is None:
                if self._send_now(front.respond, payload) is None:
                    await self._post(front.respond, payload)
            elif self._send_now(front.finish, value, details, metadata, payload) is None:
                await self._post(front.finish, value, details, metadata, payload)
        except ValueError:
            # Metadata gRPC can't carry: Go has already ended the call.
            self._server.log_error("Cannot send trailing metadata %r", self.trailing_metadata_)
        except TypeError as err:
            # Metadata of the wrong types: the call must end all the same.
            self._server.log_error("Cannot send the status: %s", err)
            await self._post(self._front.finish, _CODE_VALUES[grpc.StatusCode.UNKNOWN], f"Unexpected {type(err)}: {err}")

    def _check_open(self, what: str) -> None:
        if self.aborted:
            raise grpc.aio.AbortError("Locally aborted.")
        if self.status_sent:
            raise grpc.aio.UsageError(what)

    async def write(self, message: Any) -> None:
        self._check_open("RPC already finished.")
        body = self._server.serialize(self, message)
        self.initial_metadata_sent = True
        sent = self._send_now(self._front.send_message, body)
        if sent is None:
            sent = await self._post(self._front.send_message, body)
        if not sent:
            raise asyncio.CancelledError()

    async def read(self) -> Any:
        # Natively served methods have one request, already given to the
        # handler; grpc.aio answers EOF for the next.
        return grpc.aio.EOF

    async def send_initial_metadata(self, initial_metadata: Any) -> None:
        self._check_open("Send initial metadata failed: RPC already finished")
        if self.initial_metadata_sent:
            raise grpc.aio.UsageError("Send initial metadata failed: already sent")
        self.initial_metadata_sent = True
        await self._post(self._front.send_initial_metadata, tuple(initial_metadata or ()))

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> NoReturn:
        if trailing_metadata is not None and not isinstance(trailing_metadata, tuple):
            # grpc.aio's abort() takes a tuple (or None, refused below).
            raise TypeError(
                "Argument 'trailing_metadata' has incorrect type"
                f" (expected tuple, got {type(trailing_metadata).__name__})"
            )
        if self.status_sent:
            raise grpc.aio.UsageError("Abort already called!")
        # As grpc.aio: no trailing metadata here keeps what was set before.
        if trailing_metadata != () or not self.trailing_metadata_:
            check_trailing_metadata(trailing_metadata)
            self.trailing_metadata_ = trailing_metadata
        if code == grpc.StatusCode.OK:
            # grpc.aio leaves such a call unanswered until its deadline; the
            # sync server's answer is the useful one (README: differences).
            self._server.log_error("abort() called with StatusCode.OK; returning UNKNOWN")
            code, details = _UNKNOWN, ""
        await self.finish(code, details)
        self.aborted = True
        raise grpc.aio.AbortError()

    async def abort_with_status(self, status: grpc.Status) -> NoReturn:
        await self.abort(status.code, status.details, status.trailing_metadata)

    def set_trailing_metadata(self, trailing_metadata: Any) -> None:
        check_trailing_metadata(trailing_metadata)
        self.trailing_metadata_ = tuple(trailing_metadata)

    def trailing_metadata(self) -> Any:
        return self.trailing_metadata_

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code_ = code

    def code(self) -> Optional[grpc.StatusCode]:
        return self.code_

    def set_details(self, details: str) -> None:
        self.details_ = details

    def details(self) -> str:
        return self.details_

    def set_compression(self, compression: grpc.Compression) -> None:
        """As grpc.aio: compresses the responses (NoCompression changes
        nothing); RuntimeError once the initial metadata is sent. Never
        blocks the loop: a full call buffer defers it to the next op."""
        name = compression_name(compression)
        if self.initial_metadata_sent:
            raise RuntimeError("Compression setting must be specified before sending initial metadata")
        if not name:
            return
        try:
            if self._front.set_compression(self._call_id, name) is None:
                self.compression_pending = name
        except RuntimeError:
            pass  # the server has stopped: the call has ended

    def disable_next_message_compression(self) -> None:
        try:
            if self._front.disable_next_message_compression(self._call_id) is None:
                self.uncompressed_next_pending = True
        except RuntimeError:
            pass  # the server has stopped: the call has ended

    # -- the call --------------------------------------------------------------

    def time_remaining(self) -> Optional[float]:
        if self.status_sent:
            return 0.0
        try:
            return self._front.time_remaining(self._call_id)
        except RuntimeError:
            return 0.0

    # As grpc.aio: cancelled() means the status is CANCELLED, done() that
    # the status has been sent. A client cancel or a passed deadline makes
    # neither true (the handler learns of it by CancelledError).

    def cancelled(self) -> bool:
        return self.code_ == grpc.StatusCode.CANCELLED

    def done(self) -> bool:
        return self.status_sent

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self.done_callbacks.append(callback)
