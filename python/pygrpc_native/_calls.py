"""Running one call of pygrpc_native.server() the way grpcio runs it.

grpcio's outcomes are part of the contract: which status a handler
exception, an abort, a failing (de)serializer or a None response gives, and
which of the handler's own code and details win. One rule covers them all
(``_end``): a code or details the handler set win over the outcome's own.
"""

from __future__ import annotations

import collections
import logging
from concurrent import futures
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import grpc

from ._context import ServicerContext

if TYPE_CHECKING:  # pragma: no cover
    from ._server import _Server

_LOGGER = logging.getLogger("pygrpc_native")

_CODE_VALUES = {code: code.value[0] for code in grpc.StatusCode}
_UNKNOWN = grpc.StatusCode.UNKNOWN.value[0]
_OK = grpc.StatusCode.OK.value[0]
_INTERNAL = grpc.StatusCode.INTERNAL.value[0]
_UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED.value[0]
_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]

DETAILS_METHOD_NOT_FOUND = "Method not found!"


class HandlerCallDetails(
    collections.namedtuple("HandlerCallDetails", ("method", "invocation_metadata")),
    grpc.HandlerCallDetails,
):
    """What interceptors and generic handlers are asked about a call."""


class Method:
    """A method served natively: its path, the handler known for it, and
    that handler's own thread pool (see ``own_pool``), looked up once."""

    __slots__ = ("path", "handler", "pool")

    def __init__(self, path: str, handler: grpc.RpcMethodHandler) -> None:
        self.path = path
        self.handler = handler
        self.pool = own_pool(handler)


def _behavior(handler: grpc.RpcMethodHandler) -> Any:
    return handler.unary_stream if handler.response_streaming else handler.unary_unary


def own_pool(handler: grpc.RpcMethodHandler) -> Optional[futures.ThreadPoolExecutor]:
    """grpcio's experimental_thread_pool hook: a ThreadPoolExecutor set on
    the behavior runs its calls instead of the server's pool (grpcio ignores
    any other kind of executor there)."""
    pool = getattr(_behavior(handler), "experimental_thread_pool", None)
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
        _LOGGER.exception(what)
        return None


def _end(server: "_Server", ctx: ServicerContext, code: int, details: Any, payload: Optional[bytes] = None) -> None:
    """Ends the call. A code or details the handler set win over these."""
    if ctx.code_ is not None:
        code = _CODE_VALUES.get(ctx.code_, _UNKNOWN)
    if ctx.details_ is not None:
        details = ctx.details_
    if isinstance(details, bytes):
        details = details.decode("utf-8", "replace")
    front = server.front
    try:
        if code == _OK and payload is not None and not details and ctx.trailing_metadata_ is None:
            front.respond(ctx._call_id, payload)
        else:
            front.finish(ctx._call_id, code, details, ctx.trailing_metadata_, payload)
    except (TypeError, ValueError) as err:
        # Metadata Go can't carry: Go has ended the call with INTERNAL.
        _LOGGER.error("Cannot send trailing metadata %r: %s", ctx.trailing_metadata_, err)
    except RuntimeError:
        pass  # the server has stopped: the call has ended
    ctx.finished = True
    if ctx.callbacks:
        server.run_callbacks(ctx)


def _fail(server: "_Server", ctx: ServicerContext, exc: BaseException, template: str) -> None:
    """Ends a call whose handler (or response iterator) raised."""
    if ctx.aborted:
        _end(server, ctx, _UNKNOWN, b"RPC Aborted")
        return
    if exc in ctx.rpc_errors:
        # The call was already gone when the handler tried to use it; its
        # callbacks ran when it ended.
        ctx.finished = True
        return
    try:
        details = template.format(exc)
    except Exception:  # noqa: BLE001 - str(exc) itself may raise
        details = "Calling application raised unprintable Exception!"
    _LOGGER.error(details, exc_info=exc)
    _end(server, ctx, _UNKNOWN, details)


def reject(server: "_Server", call_id: int, code: int, details: str) -> None:
    """Ends a call before any handler ran."""
    try:
        server.front.finish(call_id, code, details)
    except RuntimeError:
        pass  # the server has stopped


def run_call(server: "_Server", method: Method, call_id: int, payload: bytes) -> None:
    """Runs one native call: find its handler, then serve it here, or in the
    handler's own thread pool if it has one (``own_pool``)."""
    ctx = ServicerContext(server, call_id, method.path)
    handler = method.handler
    pool = method.pool
    if server.interceptors:
        base = method.handler
        try:
            handler = intercept(
                server.interceptors,
                lambda _details: base,
                HandlerCallDetails(method.path, ctx.invocation_metadata()),
            )
        except Exception:  # noqa: BLE001
            _LOGGER.exception("Exception servicing handler")
            reject(server, call_id, _UNKNOWN, "Error in service handler!")
            return
        if handler is None:
            reject(server, call_id, _UNIMPLEMENTED, DETAILS_METHOD_NOT_FOUND)
            return
        pool = own_pool(handler)
    if pool is None:
        _serve(server, ctx, handler, payload)
        return
    try:
        pool.submit(_serve_in_own_pool, server, ctx, handler, payload)
    except RuntimeError:
        _LOGGER.error("pygrpc_native: the experimental_thread_pool of %s refused work (was it shut down?)", method.path)
        reject(server, call_id, _UNAVAILABLE, "Handler thread pool is shut down")


def _serve_in_own_pool(server: "_Server", ctx: ServicerContext, handler: grpc.RpcMethodHandler, payload: bytes) -> None:
    """_serve, with the guard the server's drain tasks give it: an
    unexpected error still ends the call."""
    try:
        _serve(server, ctx, handler, payload)
    except Exception:  # noqa: BLE001 - the call must end all the same
        _LOGGER.exception("pygrpc_native: unexpected error serving %s", ctx._method)
        reject(server, ctx._call_id, _UNKNOWN, "Unexpected server error")


def _serve(server: "_Server", ctx: ServicerContext, handler: grpc.RpcMethodHandler, payload: bytes) -> None:
    """Serves a call whose handler is known: deserialize, call, answer."""
    request = _transform(payload, handler.request_deserializer, "Exception deserializing message!")
    if request is None:
        _end(server, ctx, _INTERNAL, b"Exception deserializing request!")
        return
    serializer = handler.response_serializer
    if not handler.response_streaming:
        try:
            response = handler.unary_unary(request, ctx)
        except Exception as exc:  # noqa: BLE001
            _fail(server, ctx, exc, "Exception calling application: {}")
            return
        body = _transform(response, serializer, "Exception serializing message!")
        if body is None:
            _end(server, ctx, _INTERNAL, b"Failed to serialize response!")
        else:
            _end(server, ctx, _OK, b"", body)
        return

    behavior = handler.unary_stream
    if getattr(behavior, "experimental_non_blocking", False):
        _serve_non_blocking(server, ctx, behavior, request, serializer)
        return
    try:
        responses = behavior(request, ctx)
    except Exception as exc:  # noqa: BLE001
        _fail(server, ctx, exc, "Exception calling application: {}")
        return
    while True:
        try:
            response = next(responses)
        except StopIteration:
            response = None
        except Exception as exc:  # noqa: BLE001
            _fail(server, ctx, exc, "Exception iterating responses: {}")
            return
        if not _send_response(server, ctx, response, serializer):
            return


def _send_response(
    server: "_Server", ctx: ServicerContext, response: Any, serializer: Optional[Callable[[Any], bytes]]
) -> bool:
    """Sends one response of a stream; None ends the call OK, as grpcio does
    at the first None. False once the call is over (ended here, or by the
    client: cancel, deadline)."""
    if response is None:
        _end(server, ctx, _OK, b"")
        return False
    body = _transform(response, serializer, "Exception serializing message!")
    if body is None:
        _end(server, ctx, _INTERNAL, b"Failed to serialize response!")
        return False
    ctx.initial_metadata_allowed = False
    try:
        sent = server.front.send_message(ctx._call_id, body)
    except RuntimeError:
        sent = False  # the server has stopped
    if not sent:
        ctx.finished = True  # the call has ended
    return bool(sent)


def _serve_non_blocking(
    server: "_Server", ctx: ServicerContext, behavior: Any, request: Any, serializer: Optional[Callable[[Any], bytes]]
) -> None:
    """grpcio's experimental_non_blocking hook for response streams: the
    behavior gets ``send_response_callback`` as a third argument and may
    return at once; the callback, from any thread, sends a response, or with
    None ends the call OK. Until then the call stays open (client cancel and
    deadline end it as usual) without holding a thread."""

    def send_response(response: Any) -> None:
        if not ctx.finished:
            _send_response(server, ctx, response, serializer)

    try:
        behavior(request, ctx, send_response)
    except Exception as exc:  # noqa: BLE001
        _fail(server, ctx, exc, "Exception calling application: {}")
