"""Running one call of pygrpc_native.server() the way grpcio runs it.

grpcio's outcomes are part of the contract: which status a handler
exception, an abort, a failing (de)serializer or a None response gives, and
which of the handler's own code and details win. One rule covers them all
(``_end``): a code or details the handler set win over the outcome's own.
"""

from __future__ import annotations

import collections
import contextvars
import logging
import traceback
from concurrent import futures
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, NoReturn, Optional, Sequence, Tuple

import grpc

from typing import Protocol

from ._call_state import CallState, context_refs
from ._callbacks import CallbackRunner
from ._context import ServicerContext, with_empty_none_keys
from ._errors import SendLimitError
from ._grpc_logs import COMMON_LOG, SERVER_LOG

if TYPE_CHECKING:
    from ._front import NativeGrpcFront

_LOGGER = logging.getLogger("pygrpc_native")

_CODE_VALUES = {code: code.value[0] for code in grpc.StatusCode}
_UNKNOWN = grpc.StatusCode.UNKNOWN.value[0]
_OK = grpc.StatusCode.OK.value[0]
_INTERNAL = grpc.StatusCode.INTERNAL.value[0]
_UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED.value[0]
_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]

DETAILS_METHOD_NOT_FOUND = "Method not found!"

# CallRunner._request's answer for a call that ended before its handler ran.
_ENDED = object()
# CallRunner._send_response's answer for a response sent, the stream going on.
_SENT = object()
# How a call ends when its handler is done: OK, no details, no response.
_ENDS_OK = (_OK, b"", None)

# A handler's response_serializer (None: the handler returns bytes).
Serializer = Optional[Callable[[Any], bytes]]


class _HandlerCallDetails(
    collections.namedtuple("_HandlerCallDetails", ("method", "invocation_metadata")),
    grpc.HandlerCallDetails,
):
    """What interceptors and generic handlers are asked about a call."""


class Method:
    """A method served natively: its path, the handler known for it, and
    that handler's own thread pool (see ``own_pool``), looked up once.
    ``handler`` is None where each call asks the handlers again (through
    the interceptors, if any), as grpcio does: for a path no handler knew
    when an interceptor answered it, and for one that generic handlers
    answer call by call (``ServerCore.lookup``)."""

    __slots__ = ("path", "handler", "pool")

    def __init__(self, path: str, handler: Optional[grpc.RpcMethodHandler]) -> None:
        self.path = path
        self.handler = handler
        self.pool = None if handler is None else own_pool(handler)


class HandlerSource(Protocol):
    """What a CallRunner needs of its server (ServerCore): the front, the
    interceptors, and how handlers are found."""

    front: NativeGrpcFront
    interceptors: Sequence[Any]
    # Looked-up calls the interceptors already answered: call id -> their
    # handler, the call's contextvars.Context and its path (_core.PreIntercepted).
    pre_intercepted: Dict[int, Tuple[grpc.RpcMethodHandler, contextvars.Context, str]]

    # The Context each call's interceptors and handler run in.
    def new_call_context(self) -> contextvars.Context: ...

    def continuation(
        self, path: str, base: Optional[grpc.RpcMethodHandler]
    ) -> Callable[[grpc.HandlerCallDetails], Optional[grpc.RpcMethodHandler]]: ...

    # A call Python took and runs no handler for (any more): its
    # maximum_concurrent_rpcs place is free once it has ended.
    def release_slot(self, call_id: int) -> None: ...

    # Ends a call no handler runs (and releases its place).
    def reject(self, call_id: int, code: int, details: str) -> None: ...


def behavior_of(handler: grpc.RpcMethodHandler) -> Any:
    """The handler's function, whichever of grpc's four kinds it is."""
    if handler.request_streaming:
        return handler.stream_stream if handler.response_streaming else handler.stream_unary
    return handler.unary_stream if handler.response_streaming else handler.unary_unary



def own_pool(handler: grpc.RpcMethodHandler) -> Optional[futures.ThreadPoolExecutor]:
    """grpcio's experimental_thread_pool hook: a ThreadPoolExecutor set on
    the behavior runs its calls instead of the server's pool (grpcio ignores
    any other kind of executor there)."""
    pool = getattr(behavior_of(handler), "experimental_thread_pool", None)
    return pool if isinstance(pool, futures.ThreadPoolExecutor) else None


def intercept(
    interceptors: Sequence[grpc.ServerInterceptor],
    continuation: Callable[[grpc.HandlerCallDetails], Optional[grpc.RpcMethodHandler]],
    details: grpc.HandlerCallDetails,
) -> Optional[grpc.RpcMethodHandler]:
    """Runs the interceptors in order, the last one calling continuation."""

    def step(index: int, call_details: grpc.HandlerCallDetails) -> Optional[grpc.RpcMethodHandler]:
        if index == len(interceptors):
            return continuation(call_details)
        return interceptors[index].intercept_service(lambda d: step(index + 1, d), call_details)

    return step(0, details)


def _transform(value: Any, fn: Optional[Callable[[Any], Any]], what: str) -> Any:
    if fn is None:
        return value
    try:
        return fn(value)
    except Exception:  # noqa: BLE001 - grpcio logs and carries on the same way
        COMMON_LOG.exception(what)
        return None


class CallRunner:
    """Runs the native calls of one pygrpc_native.server(), holding once
    what every call needs of its server: the front, the interceptors, how
    handlers are found, and the runner of add_callback() callbacks."""

    __slots__ = ("_front", "_interceptors", "_source", "_callbacks", "_new_call_context")

    def __init__(self, source: HandlerSource, callbacks: CallbackRunner) -> None:
        self._front = source.front
        self._interceptors = tuple(source.interceptors)
        self._source = source
        self._callbacks = callbacks
        self._new_call_context = source.new_call_context

    def run(self, method: Method, call_id: int, payload: Optional[bytes]) -> None:
        """Runs one native call: find its handler, then serve it here, or in
        the handler's own thread pool if it has one (``own_pool``). Handler
        errors end the call as grpcio ends it; any other exception is a bug,
        which the caller hands to ``unexpected_error``. ``payload`` is the
        request, None for a request stream."""
        call = CallState(self._front, call_id, method.path)
        ctx = ServicerContext(call, self._callbacks)
        handler = method.handler
        pool = method.pool
        if self._interceptors or handler is None:
            pre = self._source.pre_intercepted.pop(call_id, None)
            if pre is None:
                context = self._new_call_context()
                try:
                    handler = context.run(
                        intercept,
                        self._interceptors,
                        self._source.continuation(method.path, method.handler),
                        _HandlerCallDetails(method.path, ctx.invocation_metadata()),
                    )
                    # What isn't a handler fails here, as grpc.server()'s
                    # lookup does (its serving thread dies of it; ours
                    # answers the call and serves on: README).
                    pool = None if handler is None else own_pool(handler)
                except Exception as exc:  # noqa: BLE001
                    SERVER_LOG.exception("Exception servicing handler: %s", exc)
                    self.reject(call_id, _UNKNOWN, "Error in service handler!")
                    return
            else:
                handler, context, call.method = pre  # (its method may be one shared by such calls)
                pool = own_pool(handler)  # checked when it was looked up
            if handler is None:
                self.reject(call_id, _UNIMPLEMENTED, DETAILS_METHOD_NOT_FOUND)
                return
        else:
            context = self._new_call_context()
        # The handler runs in the call's Context, out of it only once it has
        # returned (one Context can't be entered on two threads at once).
        if pool is None:
            context.run(self._serve_and_release, call, ctx, handler, payload)
            return
        try:
            pool.submit(context.run, self._serve_in_own_pool, call, ctx, handler, payload)
        except RuntimeError:
            _LOGGER.error(
                "pygrpc_native: the experimental_thread_pool of %s refused work (was it shut down?)", call.method
            )
            self.reject(call_id, _UNAVAILABLE, "Handler thread pool is shut down")

    def _serve_and_release(
        self, call: CallState, ctx: ServicerContext, handler: grpc.RpcMethodHandler, payload: Optional[bytes]
    ) -> None:
        """_serve, then (with maximum_concurrent_rpcs) tells Go the handler
        has returned, so that the call's place is free once it ended."""
        try:
            self._serve(call, ctx, handler, payload)
        finally:
            self._source.release_slot(call.call_id)

    def reject(self, call_id: int, code: int, details: str) -> None:
        """Ends a call before any handler ran."""
        self._source.reject(call_id, code, details)

    def unexpected_error(self, path: str, call_id: int) -> None:
        """Logs the exception being handled, a bug, and ends the call."""
        _LOGGER.exception("pygrpc_native: unexpected error serving %s", path)
        self.reject(call_id, _UNKNOWN, "Unexpected server error")

    def _serve_in_own_pool(
        self, call: CallState, ctx: ServicerContext, handler: grpc.RpcMethodHandler, payload: Optional[bytes]
    ) -> None:
        """_serve, with the guard the server's drain tasks give run(): an
        unexpected error still ends the call."""
        try:
            self._serve_and_release(call, ctx, handler, payload)
        except Exception:  # noqa: BLE001 - the call must end all the same
            self.unexpected_error(call.method, call.call_id)

    def _request(self, call: CallState, handler: grpc.RpcMethodHandler, payload: Optional[bytes]) -> Any:
        """The request the handler is given, of the shape it takes, whatever
        the method's own kind in Go (an interceptor may give a method a
        handler of other kinds, as grpcio allows): a request stream for a
        request-streaming handler (of one message for a unary-request
        method), else the one request (a request stream's first message;
        grpcio doesn't read on). _ENDED where the call has ended instead."""
        deserializer = handler.request_deserializer
        if payload is None:  # the method streams its requests in Go
            stream = RequestIterator(call, deserializer)
            return stream if handler.request_streaming else self._first_request(call, stream)
        request = _transform(payload, deserializer, "Exception deserializing message!")
        if request is None:
            self._end(call, _INTERNAL, b"Exception deserializing request!")
            return _ENDED
        return iter((request,)) if handler.request_streaming else request

    def _first_request(self, call: CallState, stream: "RequestIterator") -> Any:
        """A unary-request handler's request from a request stream: its
        first message; a stream that ends without one is answered as
        grpcio's sync server answers it (UNIMPLEMENTED)."""
        try:
            return next(stream)
        except grpc.RpcError:
            return _ENDED  # the call is gone
        except StopIteration:
            if not call.ended:
                self._end(call, _UNIMPLEMENTED, f'"{call.method.encode()!r}" requires exactly one request message.')
            return _ENDED

    def _serve(
        self, call: CallState, ctx: ServicerContext, handler: grpc.RpcMethodHandler, payload: Optional[bytes]
    ) -> None:
        """Serves a call whose handler is known: deserialize, call, answer."""
        request = self._request(call, handler, payload)
        if request is _ENDED:
            return
        serializer = handler.response_serializer
        behavior = behavior_of(handler)
        if handler.response_streaming:
            if getattr(behavior, "experimental_non_blocking", False):
                self._serve_non_blocking(call, ctx, behavior, request, serializer)
            else:
                self._run_stream(call, ctx, behavior, request, serializer)
            return
        held = context_refs(ctx)
        ok, result = self._call(call, behavior, request, ctx)
        if ok:
            body = _transform(result, serializer, "Exception serializing message!")
            if body is not None:  # the usual case, without _end_as
                if context_refs(ctx) > held:
                    call.keep_details()
                self._end(call, _OK, b"", body)
                return
            result = _INTERNAL, b"Failed to serialize response!", None
        self._end_as(call, result, context_refs(ctx) > held)

    def _call(self, call: CallState, behavior: Any, *args: Any) -> Tuple[bool, Any]:
        """(True, what behavior(*args) returned), or (False, how the call
        ends) when it raised: the exception, logged, is let go of before
        the caller counts the context's references (context_refs)."""
        try:
            return True, behavior(*args)
        except Exception as exc:  # noqa: BLE001
            return False, self._failure(call, exc, "Exception calling application: {}")

    def _run_stream(
        self, call: CallState, ctx: ServicerContext, behavior: Any, request: Any, serializer: Serializer
    ) -> None:
        """Runs a response-streaming handler, sends what it yields, and
        ends the call while its response iterator is still referenced, as
        grpcio does (a generator left at a None response is closed after
        the answer)."""
        held = context_refs(ctx)
        ok, result = self._call(call, behavior, request, ctx)
        end = self._send_responses(call, result, serializer) if ok else result
        self._end_as(call, end, context_refs(ctx) > held)

    def _send_responses(
        self, call: CallState, responses: Iterator[Any], serializer: Serializer
    ) -> Optional[Tuple[int, Any, None]]:
        """Sends what responses yields: how the call ends then, or None if
        it has ended already."""
        while True:
            try:
                response = next(responses)
            except StopIteration:
                return _ENDS_OK
            except Exception as exc:  # noqa: BLE001
                return self._failure(call, exc, "Exception iterating responses: {}")
            end = self._send_response(call, response, serializer)
            if end is not _SENT:
                return end

    def _end_as(self, call: CallState, end: Optional[Tuple[int, Any, Optional[bytes]]], shared: bool) -> None:
        """Ends the call as end says (code, details, response; None: it has
        ended already). shared: the handler left its context to someone
        (context_refs), who may read the call's details after the answer,
        when Go has let go of the call: they are kept first."""
        if end is not None:
            if shared:
                call.keep_details()
            self._end(call, *end)

    def _send_response(self, call: CallState, response: Any, serializer: Serializer) -> Any:
        """Sends one response of a stream: _SENT, and the stream goes on;
        else how the call ends: OK at the first None, as grpcio's; INTERNAL
        for a response that doesn't serialize; None once the call is over
        (ended by the client: cancel, deadline; or the server stopped)."""
        if response is None:
            return _ENDS_OK
        body = _transform(response, serializer, "Exception serializing message!")
        if body is None:
            return _INTERNAL, b"Failed to serialize response!", None
        call.initial_metadata_sent = True
        try:
            sent = self._front.send_message(call.call_id, body)
        except (RuntimeError, SendLimitError):
            # The server has stopped; or the message is over the send limit,
            # and Go has ended the call with RESOURCE_EXHAUSTED: the
            # response iterator is let go at once, as grpcio's is.
            sent = False
        except TypeError as err:
            self._end_unsendable(call, err)
            sent = False
        if not sent:
            call.ended = True  # the call has ended
            if call.callbacks:
                self._callbacks.call_ended(call)
            return None
        return _SENT

    def _serve_non_blocking(
        self, call: CallState, ctx: ServicerContext, behavior: Any, request: Any, serializer: Serializer
    ) -> None:
        """grpcio's experimental_non_blocking hook for response streams: the
        behavior gets ``send_response_callback`` as a third argument and may
        return at once; the callback, from any thread, sends a response, or
        with None ends the call OK. Until then the call stays open (client
        cancel and deadline end it as usual) without holding a thread."""

        def send_response(response: Any) -> None:
            if response is not None and serializer is None and not isinstance(response, bytes):
                # grpcio's callback hands it to its core's send op, whose
                # argument check raises here, to the caller; the call goes
                # on.
                raise TypeError(f"Argument 'message' has incorrect type (expected bytes, got {type(response).__name__})")
            if not call.ended:
                end = self._send_response(call, response, serializer)
                if end is not _SENT and end is not None:
                    self._end(call, *end)

        # The answers come from elsewhere, maybe before the behavior has
        # returned: the details are kept first for whoever reads the context
        # then (this hook is rare; see context_refs for the others).
        call.keep_details()
        ok, end = self._call(call, behavior, request, ctx, send_response)
        if not ok:
            self._end_as(call, end, False)

    def _end(self, call: CallState, code: int, details: Any, payload: Optional[bytes] = None) -> None:
        """Ends the call. A code or details the handler set win over these."""
        if call.code is not None:
            code = _CODE_VALUES.get(call.code, _UNKNOWN)
        if call.details is not None:
            details = call.details  # bytes (set_details() encodes), sent as they are, as grpcio does
        metadata = call.trailing_metadata
        # Before Go ends the call: a thread still reading the request stream
        # (woken by that end) must find the call answered.
        call.answered = True
        try:
            if code == _OK and payload is not None and not details and metadata is None:
                self._front.respond(call.call_id, payload)
            else:
                try:
                    self._front.finish(call.call_id, code, details, metadata, payload)
                except TypeError:
                    fixed = with_empty_none_keys(metadata)
                    if fixed is None:
                        raise
                    self._front.finish(call.call_id, code, details, fixed, payload)  # INTERNAL, as grpcio
        except SendLimitError:
            pass  # Go has ended the call (RESOURCE_EXHAUSTED); grpcio logs nothing either
        except (TypeError, ValueError) as err:
            self._end_unsendable(call, err)
        except RuntimeError:
            pass  # the server has stopped: the call has ended
        call.ended = True
        if call.callbacks:
            self._callbacks.call_ended(call)

    def _end_unsendable(self, call: CallState, err: Exception) -> None:
        """Ends a call whose answer the front refused: a response that isn't
        bytes (no serializer made it so), trailing metadata of the wrong
        types. grpcio's server logs such an error and never answers the
        call; ours answers as grpc.aio does (UNKNOWN, with the error), so
        the client doesn't wait out its deadline. Where Go refused the
        metadata's content (ValueError) it has ended the call, INTERNAL, and
        this finish does nothing."""
        _LOGGER.error("Cannot send the answer to call %d: %s", call.call_id, err)
        try:
            self._front.finish(call.call_id, _UNKNOWN, f"Unexpected {type(err)}: {err}")
        except RuntimeError:
            pass  # the server has stopped: the call has ended

    def _failure(self, call: CallState, exc: BaseException, template: str) -> Optional[Tuple[int, Any, None]]:
        """How a call whose handler (or response iterator) raised exc ends,
        once exc is logged as grpcio logs it; None if the call was gone."""
        if call.aborted:
            return _UNKNOWN, b"RPC Aborted", None
        if exc in call.gone_errors:
            # The call was already gone when the handler tried to use it; its
            # callbacks ran when it ended.
            call.ended = True
            return None
        try:
            details = template.format(exc)
        except Exception:  # noqa: BLE001 - str(exc) itself may raise
            details = "Calling application raised unprintable Exception!"
            # As grpcio: the traceback as a list of lines, logged and
            # printed with the error str() raised.
            SERVER_LOG.exception(traceback.format_exception(type(exc), exc, exc.__traceback__))
            traceback.print_exc()
        SERVER_LOG.error(details, exc_info=exc)
        return _UNKNOWN, details, None

class RequestIterator(Iterator[Any]):
    """A request stream as grpcio's handlers iterate it: each ``next()``
    takes the next message from Go, waiting without the GIL; the iterator
    ends at the client's half-close, and once the server has ended the
    call (answered it, or refused a message); it raises grpc.RpcError (as
    grpcio's does) once the call is gone: cancelled, or its deadline
    passed."""

    __slots__ = ("_call", "_deserializer")

    def __init__(self, call: CallState, deserializer: Optional[Callable[[bytes], Any]]) -> None:
        self._call = call
        self._deserializer = deserializer

    def __iter__(self) -> "RequestIterator":
        return self

    def __next__(self) -> Any:
        call = self._call
        if call.ended:
            # Answered by the server: grpcio's iterator just ends. A call
            # that is gone raises, as below.
            self._end_or_raise()
        try:
            message = call.front.read_message(call.call_id)
        except RuntimeError:
            message = False  # the server has stopped: the call has ended
        if message is None:
            call.requests_ended = True
            raise StopIteration()
        if message is False:
            self._end_or_raise()
        if self._deserializer is None:
            return message
        return self._deserialize(message)

    def _end_or_raise(self) -> NoReturn:
        call = self._call
        if call.answered:
            raise StopIteration()
        raise call.gone_error()

    def _deserialize(self, message: bytes) -> Any:
        """grpcio's sync server: a message the deserializer fails on (or
        makes None of) ends the call at once (INTERNAL), and the iterator
        ends there."""
        request = _transform(message, self._deserializer, "Exception deserializing message!")
        if request is None:
            call = self._call
            call.answered = True
            try:
                call.front.finish(call.call_id, _INTERNAL, "Exception deserializing request!")
            except RuntimeError:
                pass
            call.ended = True
            raise StopIteration()
        return request

    def next(self) -> Any:
        """grpcio's request iterators have next() too."""
        return self.__next__()
