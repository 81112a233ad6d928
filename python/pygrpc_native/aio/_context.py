"""The contexts of calls served by pygrpc_native.aio.server().

``ServicerContext`` (grpc.aio's) is what coroutine handlers get;
``SyncHandlerContext`` (grpcio's sync context, as grpc.aio gives it) is what
other handlers get, in the migration thread pool. Both are views of the
call's one CallState, like the sync server's context. The call's outcome is
sent as soon as it is known (``abort`` sends it at once, as grpc.aio does);
everything about the call itself is asked of the Go core on demand.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, List, NoReturn, Optional, Tuple

import grpc
import grpc.aio

from .._call_state import CallState
from .._errors import SendLimitError
from .._grpc_logs import AIO_LOG
from .._context import (
    CallInfo,
    SyncContextBase,
    as_grpcio_unpacks,
    check_binary_values,
    compression_name,
    refuse_ok_abort,
    with_empty_none_keys,
)
from ._waits import FINISHED, LoopWaits, check_open, server_stopped_error

_LOGGER = logging.getLogger("pygrpc_native")

_CODE_VALUES = {code: code.value[0] for code in grpc.StatusCode}
_CODES = {code.value[0]: code for code in grpc.StatusCode}
_OK = grpc.StatusCode.OK
_UNKNOWN = grpc.StatusCode.UNKNOWN
_CANCELLED = grpc.StatusCode.CANCELLED

# What set_code(None) stores in CallState.code: on grpc.aio None is a code
# (sent as UNKNOWN), not "no code" as on the sync server, while code() still
# reads None.
_NONE_GIVEN = object()
# The details set_details(None) leaves: empty details to send (a str equal
# to ''), that details() reads as None.
_DETAILS_NONE = type("_DetailsNone", (str,), {})()
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


def aio_compression_name(compression: Any) -> Optional[str]:
    """The Go core's name of a compression a handler gave set_compression():
    grpc.aio ignores anything that isn't a grpc.Compression (None, a str,
    an int): None, nothing to set. NoCompression is "" (none): on grpc.aio
    it turns off the server's default compression for the call (grpcio's
    sync server ignores it)."""
    return compression_name(compression) if isinstance(compression, grpc.Compression) else None


def status_code(code: Any) -> grpc.StatusCode:
    """The status grpc.aio sends for a code a handler gave set_code() or
    abort(): a grpc.StatusCode as is, an int as the code of that value
    (True is CANCELLED), anything else (None, an int out of gRPC's range)
    as UNKNOWN."""
    if code.__class__ is grpc.StatusCode:
        return code  # type: ignore[no-any-return]
    if isinstance(code, int):
        return _CODES.get(code, _UNKNOWN)
    return _UNKNOWN


def failure_code(call: CallState) -> grpc.StatusCode:
    """grpc.aio's code for a call whose handler raised: the one set with
    set_code(), unless none or OK was set."""
    if call.code is None:
        return _UNKNOWN
    code = status_code(call.code)
    return _UNKNOWN if code is _OK else code


class CallEnded(asyncio.CancelledError):
    """A send found its call ended (a client cancel, a deadline, a stop):
    a CancelledError for the response iterator's loop, whose task is then
    over; write() raises grpc.aio's error instead."""


def _cygrpc() -> Any:
    """grpcio's core module, whose ExecuteBatchError grpc.aio raises."""
    from grpc._cython import cygrpc

    return cygrpc


# Marks the errors of ops on a call that its client closed (ended_error).
_CLIENT_CLOSED = "_pygrpc_native_client_closed"

# How long an op that found its call ended in Go waits for its task's
# cancellation to land (ServicerContext._ended_in_go).
_CANCEL_LANDS = 0.5
# A write that waited for room at least this long when its call ended was
# stuck, as grpc.aio's is in flow control when the client stops reading;
# a shorter wait is only the call's buffer being written out (grpc-core
# would have taken the message), so the write meets the cancellation.
_STUCK = 0.25


def ended_error() -> Exception:
    """grpc.aio's error for an op on a call that its client closed (a
    cancel, a deadline): its core's, which grpc.aio's server ignores once
    the client has closed the call (client_closed_error says whether it is
    one)."""
    err = _cygrpc().ExecuteBatchError('Failed "execute_batch": the call has ended')
    setattr(err, _CLIENT_CLOSED, True)
    return err


def client_closed_error(exc: BaseException) -> bool:
    """Whether exc is ended_error()'s."""
    return getattr(exc, _CLIENT_CLOSED, False)


def over_send_limit(call: CallState) -> Exception:
    """grpc.aio's error for a message over grpc.max_send_message_length,
    which Go refused at its send (SendLimitError) and whose call it ended,
    RESOURCE_EXHAUSTED: its core's, which grpc.aio's server logs (the
    client didn't close the call)."""
    call.ended = True
    return _cygrpc().ExecuteBatchError('Failed "execute_batch": the message is larger than grpc.max_send_message_length')


def invalid_initial_metadata() -> Exception:
    """grpc.aio's error (its core's) for initial metadata Go refused for its
    content, from its contexts for coroutines and for plain functions."""
    return _cygrpc().ExecuteBatchError('Failed "execute_batch": invalid initial metadata')


def check_details(details: Any) -> None:
    """grpc.aio's contexts take details as a str (or None), refusing
    anything else where it is given (a str subclass, such as a str Enum's
    member, too: its argument is typed str), with this TypeError."""
    if details is not None and type(details) is not str:
        raise TypeError(f"Argument 'details' has incorrect type (expected str, got {type(details).__name__})")


def record_abort(call: CallState, code: Any, details: Any, trailing_metadata: Any) -> Tuple[grpc.StatusCode, Any]:
    """What abort(code, details, trailing_metadata) leaves in the call, as
    grpc.aio's abort() keeps it, and the status it sends: the code is the
    call's (code() reads it, cancelled() is true for CANCELLED); empty
    details send those set_details() gave, other details replace them;
    no trailing metadata keeps what set_trailing_metadata() gave. Argument
    types are checked first, with grpc.aio's TypeErrors."""
    check_details(details)
    if trailing_metadata is not None and not isinstance(trailing_metadata, tuple):
        raise TypeError(
            f"Argument 'trailing_metadata' has incorrect type (expected tuple, got {type(trailing_metadata).__name__})"
        )
    if trailing_metadata != () or not call.trailing_metadata:
        check_trailing_metadata(trailing_metadata)
        call.trailing_metadata = trailing_metadata
    if details == "" and call.details:
        details = call.details
    else:
        call.details = details
    call.code = _NONE_GIVEN if code is None else code  # type: ignore[assignment]  # as AioCode.set_code
    return refuse_ok_abort(status_code(code), details, AIO_LOG)


def serialize(serializer: Optional[Callable[[Any], Any]], message: Any) -> bytes:
    """A response as grpc.aio sends it: None as an empty message (also when
    a serializer returns None), str as UTF-8, the latter even before a
    serializer sees it. Anything else that isn't bytes (bytearray and
    memoryview too, and bytes subclasses: grpc.aio takes exact bytes only)
    raises grpc.aio's TypeError, which ends the call."""
    if isinstance(message, str):
        message = message.encode()
    if serializer is not None:
        message = serializer(message)
    if message is None:
        return b""
    if type(message) is not bytes:
        raise TypeError(f"Expected bytes, got {type_name(type(message))}")
    return message


_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: C types, static or made from a spec
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE


def type_name(cls: type) -> str:
    """A type's name as C code's messages give it (tp_name), grpc.aio's
    included: a class defined in Python by its name, a C type with its
    module ("_asyncio.Future", "array.array"), a builtin alone ("int")."""
    defined_in_python = cls.__flags__ & _HEAP_TYPE and not cls.__flags__ & _IMMUTABLE_TYPE
    if defined_in_python or cls.__module__ == "builtins":
        return cls.__name__
    return f"{cls.__module__}.{cls.__name__}"


def send_blocking(call: CallState, send: Callable[..., Optional[bool]], *args: Any) -> Optional[bool]:
    """A send on the call from a pool thread, on the loop's non-blocking
    front: waits for room in Go (wait_room), which is fine off the loop."""
    call_id = call.call_id
    try:
        while (ok := send(call_id, *args)) is None:
            if not call.front.wait_room(call_id):
                return False  # the call has ended
    except SendLimitError:
        raise over_send_limit(call) from None
    return ok


class AioStatus:
    """set_code(), code(), set_details() and details() as grpc.aio's
    contexts keep them: any code is taken (status_code() says what is sent
    for it), set_code(None) too; details() reads '' until set, and None
    after set_details(None), which sends empty details."""

    __slots__ = ()
    _call: CallState

    def set_code(self, code: grpc.StatusCode) -> None:
        self._call.code = _NONE_GIVEN if code is None else code  # type: ignore[assignment]

    def code(self) -> Optional[grpc.StatusCode]:
        code = self._call.code
        return None if code is _NONE_GIVEN else code

    def set_details(self, details: str) -> None:
        check_details(details)
        self._call.details = _DETAILS_NONE if details is None else details

    def details(self) -> Optional[str]:
        details = self._call.details
        if details is None:
            return ""
        return None if details is _DETAILS_NONE else details  # type: ignore[return-value]  # str on aio


class ServicerContext(AioStatus, CallInfo, grpc.aio.ServicerContext):
    """The context coroutine handlers of pygrpc_native.aio.server() get."""

    __slots__ = ("_call", "_waits")

    # A set_compression() / disable_next_message_compression() that found
    # the call's buffer full, sent before the next op. Class defaults, set
    # on a context only then.
    _compression_pending: Optional[str] = None
    _uncompressed_next_pending = False

    def __init__(self, call: CallState, waits: LoopWaits) -> None:
        self._call = call
        self._waits = waits

    # -- sending ---------------------------------------------------------------

    def _send_now(self, send: Callable[..., Optional[bool]], *args: Any) -> Optional[bool]:
        """Hands an op to Go when that needs no await (the usual case): None
        when the call's buffer is full or a compression change still waits
        to go first, and then _post must send it."""
        if self._compression_pending is not None or self._uncompressed_next_pending:
            return None
        try:
            return send(self._call.call_id, *args)
        except RuntimeError:
            return False  # the server has stopped: the call has ended

    async def _post(self, send: Callable[..., Optional[bool]], *args: Any, ending: bool = False) -> bool:
        """Hands an op to Go without blocking the loop: a full call buffer
        (a slow client) is waited out here, not in Go. ending: the op is the
        call's status (_finish); any other op that waited finds the call
        over once its handler's side has ended it meanwhile (returned,
        aborted: another task's write, stuck, fails then, as on grpc.aio)."""
        front = self._call.front
        if self._compression_pending is not None:
            name, self._compression_pending = self._compression_pending, None
            await self._post(front.set_compression, name, ending=ending)
        if self._uncompressed_next_pending:
            self._uncompressed_next_pending = False
            await self._post(front.disable_next_message_compression, ending=ending)
        call = self._call
        call_id = call.call_id
        try:
            while (ok := send(call_id, *args)) is None:
                await self._waits.room(call_id)
                if call.ended and not ending:
                    return False
        except RuntimeError:
            return False  # the server has stopped: the call has ended
        return bool(ok)

    async def _finish(self, code: Any, details: Optional[str], payload: Optional[bytes] = None) -> bool:
        """Sends the status (once). ``code`` is an int or grpc.StatusCode.
        False when the call had ended before (here, or in Go: a client
        cancel, a deadline, a stop)."""
        call = self._call
        if call.ended:
            return False
        call.ended = True
        if call.requests is not None:
            self._waits.ended(call.call_id)  # a reader the handler left running
        value = _CODE_VALUES[code if code.__class__ is grpc.StatusCode else status_code(code)]
        front = call.front
        metadata = call.trailing_metadata or None
        try:
            if value == 0 and payload is not None and not details and metadata is None:
                sent = self._send_now(front.respond, payload)
                if sent is None:
                    sent = await self._post(front.respond, payload, ending=True)
            else:
                sent = self._send_now(front.finish, value, details, metadata, payload)
                if sent is None:
                    sent = await self._post(front.finish, value, details, metadata, payload, ending=True)
            return bool(sent)
        except UnicodeEncodeError as err:
            # Details that can't be encoded (a lone surrogate): nothing was
            # sent, and the call is left to its deadline, as grpc.aio leaves
            # it, which reports the error as the handler's.
            AIO_LOG.error("Unexpected [%s] raised by servicer method [%s]", type(err).__name__, call.method, exc_info=err)
        except ValueError as err:
            # Go refused and has ended the call: metadata gRPC can't carry
            # (INTERNAL "Invalid metadata"), or a message over the send
            # limit (RESOURCE_EXHAUSTED); logged as grpc.aio logs its core's
            # refusal.
            if isinstance(err, SendLimitError):
                refused = over_send_limit(call)
            else:
                refused = _cygrpc().ExecuteBatchError('Failed "execute_batch": invalid trailing metadata')
            AIO_LOG.error("ExecuteBatchError raised in core by servicer method [%s]", call.method, exc_info=refused)
        except TypeError as err:
            # Metadata of the wrong types: the call must end all the same.
            _LOGGER.error("Cannot send the status: %s", err)
            await self._post(front.finish, _CODE_VALUES[_UNKNOWN], f"Unexpected {type(err)}: {err}", ending=True)
        return True

    async def write(self, message: Any) -> None:
        try:
            body = self._write_now(message)
        except CallEnded:
            await self._ended_in_go()
        if body is None:
            return
        loop = self._waits.loop
        waited_from = loop.time()
        try:
            await self._write_later(body)
        except CallEnded:
            if loop.time() - waited_from < _STUCK:
                await self._ended_in_go()
            # The call ended while the write was stuck (its client had
            # stopped reading): grpc.aio's send, stuck in HTTP/2 flow
            # control, fails with its core's error, an Exception (a
            # handler's `except Exception` cleanup runs); the task's
            # cancellation meets its next await.
            raise ended_error() from None

    async def _ended_in_go(self, stopped_error: bool = True) -> NoReturn:
        """An op found its call ended in Go at once (a client cancel, a
        deadline, a stop), and this context didn't end it. grpc.aio's op
        waits for its core, and the task's cancellation lands there: a
        handler that writes without ever waiting (a fast producer) gets
        CancelledError, not an error its server would log. Ours didn't
        wait: Go's news of the end may not have reached the loop yet, so
        the op waits for the cancellation here (up to _CANCEL_LANDS, or one
        turn of the loop once the server has cancelled the task). Where it
        landed already (the handler caught it) or never comes, the op
        raises grpc.aio's error: _ServerStoppedError once the server's stop
        has begun (unless not stopped_error: grpc.aio's abort() doesn't
        check, its status op fails), else its core's."""
        waits = self._waits
        if waits.stopping and stopped_error:
            raise server_stopped_error()
        # Once the server has cancelled the task, one turn of the loop lands
        # a cancellation still pending; else it was caught already.
        await asyncio.sleep(0 if self._call.call_id in waits.cancelled else _CANCEL_LANDS)
        raise ended_error()

    def _write_now(self, message: Any) -> Optional[bytes]:
        """write() as far as it goes without an await, which is all of it
        when the call's buffer has room (the usual case): None once the
        message is sent; otherwise its serialized body, for _write_later.
        Lets a loop of writes (an async generator's responses) skip a
        coroutine per message."""
        check_open(self._call, FINISHED)
        call = self._call
        body = serialize(call.serializer, message)
        call.initial_metadata_sent = True
        try:
            sent = self._send_now(call.front.send_message, body)
        except SendLimitError:
            raise over_send_limit(call) from None
        if sent:
            return None
        if sent is False:
            raise CallEnded()
        return body

    async def _write_later(self, body: bytes) -> None:
        """The rest of a write() that _write_now could not finish."""
        try:
            sent = await self._post(self._call.front.send_message, body)
        except SendLimitError:
            raise over_send_limit(self._call) from None
        if not sent:
            # Ended by the handler's side while this write waited (another
            # task returned or aborted): grpc.aio's UsageError or AbortError.
            check_open(self._call, FINISHED)
            raise CallEnded()

    async def read(self) -> Any:
        """The next request of a request stream, grpc.aio.EOF after the
        last. A unary request was given to the handler already; grpc.aio
        answers EOF for the next."""
        requests = self._call.requests
        if requests is None:
            check_open(self._call, FINISHED)
            return grpc.aio.EOF
        return await requests.read()

    async def send_initial_metadata(self, initial_metadata: Any) -> None:
        check_open(self._call, FINISHED)
        call = self._call
        if call.initial_metadata_sent:
            _initial_metadata_again()
        metadata = tuple(initial_metadata)  # None: grpc.aio's TypeError
        check_binary_values(metadata)
        call.initial_metadata_sent = True  # before the await: a write meanwhile comes after it
        try:
            try:
                sent = await self._post(call.front.send_initial_metadata, metadata)
            except TypeError:
                fixed = with_empty_none_keys(metadata)
                if fixed is None:
                    raise
                sent = await self._post(call.front.send_initial_metadata, fixed)  # refused for its content
        except TypeError as err:
            # Refused for its shape or types: nothing was sent, and the
            # handler may send again, as on grpc.aio.
            call.initial_metadata_sent = False
            raise as_grpcio_unpacks(err, metadata) from None
        except ValueError:
            # Refused for its content (a key that isn't a header name, a
            # value that isn't printable ASCII): Go ended the call INTERNAL
            # "Invalid metadata", and grpc.aio raises its core's error.
            raise invalid_initial_metadata() from None
        if not sent:
            await self._ended_in_go()

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> NoReturn:
        call = self._call
        if call.ended:
            check_details(details)
            if call.aborted:
                raise grpc.aio.UsageError("Abort already called!")
            # Answered already: grpc.aio's core refuses a second status.
            raise _cygrpc().ExecuteBatchError("Failed grpc_call_start_batch: 1 with grpc_call_error value: 'GRPC_CALL_ERROR'")
        code, details = record_abort(call, code, details, trailing_metadata)
        call.keep_details()  # the handler's finally blocks may read them, as on grpc.aio
        # Before the status goes: another task's op meanwhile (a write that
        # waited for room) fails with AbortError, as on grpc.aio.
        call.aborted = True
        if not await self._finish(code, details):
            await self._ended_in_go(stopped_error=False)
        raise grpc.aio.AbortError("Locally aborted.")

    async def abort_with_status(self, status: grpc.Status) -> NoReturn:
        await self.abort(status.code, status.details, status.trailing_metadata)

    def set_trailing_metadata(self, trailing_metadata: Any) -> None:
        check_trailing_metadata(trailing_metadata)
        self._call.trailing_metadata = tuple(trailing_metadata)

    def trailing_metadata(self) -> Any:
        metadata = self._call.trailing_metadata
        return () if metadata is None else metadata

    def set_compression(self, compression: grpc.Compression) -> None:
        """As grpc.aio: compresses the responses (NoCompression: not at
        all, whatever the server's default); RuntimeError once the initial
        metadata is sent. Never blocks the loop: a full call buffer defers
        it to the next op."""
        name = aio_compression_name(compression)
        call = self._call
        if call.initial_metadata_sent or call.ended:  # an answer sends it
            raise RuntimeError("Compression setting must be specified before sending initial metadata")
        if name is None:
            return
        try:
            if call.front.set_compression(call.call_id, name) is None:
                self._compression_pending = name
        except RuntimeError:
            pass  # the server has stopped: the call has ended

    def disable_next_message_compression(self) -> None:
        call = self._call
        try:
            if call.front.disable_next_message_compression(call.call_id) is None:
                self._uncompressed_next_pending = True
        except RuntimeError:
            pass  # the server has stopped: the call has ended

    # -- the call --------------------------------------------------------------

    def time_remaining(self) -> Optional[float]:
        call = self._call
        if call.ended:
            return call.time_remaining_kept(0.0)
        try:
            return call.time_remaining_kept(call.front.time_remaining(call.call_id))
        except RuntimeError:
            return call.time_remaining_kept(0.0)

    # As grpc.aio: cancelled() means the status is CANCELLED, done() that
    # the status has been sent. A client cancel or a passed deadline makes
    # neither true (the handler learns of it by CancelledError).

    def cancelled(self) -> bool:
        code = self._call.code
        return code is not None and status_code(code) is _CANCELLED

    def done(self) -> bool:
        return self._call.ended

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        if not callable(callback):
            raise TypeError("the first argument must be callable")  # asyncio's words, as grpc.aio's
        # The aio server calls them with this context once the call is over.
        call = self._call
        if call.callbacks:
            call.callbacks.append(callback)  # type: ignore[union-attr]  # a list once not empty
        else:
            call.keep_details()  # for the callbacks to read
            call.callbacks = [callback]


def _initial_metadata_again() -> NoReturn:
    raise grpc.aio.UsageError("Send initial metadata failed: already sent")


class SyncHandlerContext(AioStatus, SyncContextBase):
    """The context of a non-coroutine handler, run in the migration thread
    pool: grpcio's sync context, except that abort() sends the status and
    returns instead of raising, as grpc.aio's does. ``callbacks``: what
    add_callback() was given, in order (the handler's thread adds them;
    the loop runs them once the handler has returned: Server._run_sync)."""

    __slots__ = ("callbacks",)

    def __init__(self, call: CallState) -> None:
        super().__init__(call)
        self.callbacks: List[Callable[[], Any]] = []

    def abort(  # type: ignore[override]
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()
    ) -> None:
        call = self._call
        code, details = record_abort(call, code, details, trailing_metadata)
        call.keep_details()  # the handler goes on, and may read them
        call.aborted = call.ended = True
        send_blocking(call, call.front.finish, _CODE_VALUES[code], details, call.trailing_metadata)

    def _initial_metadata_again(self) -> NoReturn:
        _initial_metadata_again()  # grpc.aio runs the coroutine's check for its sync context

    def _send_initial_metadata(self, initial_metadata: Any) -> None:
        try:
            super()._send_initial_metadata(initial_metadata)
        except ValueError:
            raise invalid_initial_metadata() from None  # grpc.aio sends it through the loop, as a coroutine would

    def _initial_metadata_after_the_answer(self) -> None:
        raise grpc.aio.UsageError("RPC already finished.")  # as grpc.aio's

    def _gone_error(self) -> Exception:
        # grpc.aio's sync context sends through the loop: its core's error.
        return ended_error()

    def set_compression(self, compression: grpc.Compression) -> None:
        # As grpc.aio's context: RuntimeError once the initial metadata is
        # sent, NoCompression turns the server's default off.
        name = aio_compression_name(compression)
        call = self._call
        if call.initial_metadata_sent or call.ended:  # an answer sends it
            raise RuntimeError("Compression setting must be specified before sending initial metadata")
        if name is not None:
            send_blocking(call, call.front.set_compression, name)

    def disable_next_message_compression(self) -> None:
        call = self._call
        send_blocking(call, call.front.disable_next_message_compression)

    def add_callback(self, callback: Any) -> None:  # type: ignore[override]
        # grpc.aio's sync context returns None here (see callbacks).
        self.callbacks.append(callback)

    def set_trailing_metadata(self, trailing_metadata: Any) -> None:
        check_trailing_metadata(trailing_metadata)
        self._call.trailing_metadata = tuple(trailing_metadata)

    def time_remaining(self) -> Optional[float]:  # type: ignore[override]
        # grpc.aio's context: None without a deadline.
        call = self._call
        try:
            return call.time_remaining_kept(call.front.time_remaining(call.call_id))
        except RuntimeError:
            return call.time_remaining_kept(0.0)  # the server has stopped: the call has ended

    def is_active(self) -> bool:
        call = self._call
        return not call.ended and call.front.is_active(call.call_id)

    def cancel(self) -> None:
        call = self._call
        call.front.cancel(call.call_id)
        call.ended = True
