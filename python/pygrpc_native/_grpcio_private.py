"""grpcio's private per-call attributes that popular libraries read, on the
contexts of pygrpc_native.server().

grpcio's sync context keeps its call's status in ``context._state`` (a
``grpc._server._RPCState``) and the call's request event in
``context._rpc_event``. Neither is public, yet libraries read them:
py-grpc-prometheus and Datadog's ddtrace (``_state.code``,
``_state.details``, ``_state.client == "cancelled"``), and many interceptors
that want the method's name (``_rpc_event.call_details.method``, which
grpcio's sync context has no public way to give). Without them, every call
through such an interceptor failed with AttributeError. These views answer
the same attributes from the call's CallState and the Go core; they are made
only when read, so other calls pay nothing.

grpc.aio's contexts have no such attributes, and neither do ours.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional, Protocol, Tuple

if TYPE_CHECKING:
    from ._call_state import CallState


class _Context(Protocol):
    """What the views read of the sync server's context (_context.py, which
    makes them: no import back)."""

    _call: CallState

    def is_active(self) -> bool: ...

    def time_remaining(self) -> float: ...

    def invocation_metadata(self) -> Tuple[Any, ...]: ...

# grpcio's _RPCState.client: the request side of the call, as grpcio's
# server names it.
_OPEN, _CLOSED, _CANCELLED = "open", "closed", "cancelled"


class _CallField:
    """An attribute of RpcStateView that is its call's field of the same
    name, read and written through (grpcio's _RPCState fields are plain,
    writable attributes)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, view: Any, owner: Optional[type] = None) -> Any:
        return self if view is None else getattr(view._call, self._name)

    def __set__(self, view: Any, value: Any) -> None:
        setattr(view._call, self._name, value)


class RpcStateView:
    """``context._state``: what the handler set (code, details, trailing
    metadata, abort), read and written through to the call as grpcio's
    _RPCState fields are; ``client`` is grpcio's word for the client's side:
    "cancelled" once the call is gone unanswered (cancelled, deadline
    passed, connection closed), "closed" once the server answered or the
    handler read its request stream to the end, "open" before."""

    __slots__ = ("_context",)

    def __init__(self, context: _Context) -> None:
        self._context = context

    @property
    def _call(self) -> CallState:
        return self._context._call

    # Read and written through to the call's field of the same name.
    code = _CallField()
    details = _CallField()  # bytes: the sync contexts store them so
    trailing_metadata = _CallField()

    @property
    def aborted(self) -> bool:
        return self._call.aborted

    @property
    def client(self) -> str:
        call = self._call
        if call.answered:
            return _CLOSED
        if not self._context.is_active():
            return _CANCELLED
        return _CLOSED if call.requests_ended else _OPEN

    @property
    def initial_metadata_allowed(self) -> bool:
        call = self._call
        return not (call.initial_metadata_sent or call.ended)


class CallDetailsView:
    """``context._rpc_event.call_details``: the method's path and the
    authority as bytes, and the deadline in seconds since the epoch
    (2**63 without one), as grpcio's cygrpc.CallDetails."""

    __slots__ = ("method", "host", "deadline")

    def __init__(self, method: bytes, host: bytes, deadline: float) -> None:
        self.method = method
        self.host = host
        self.deadline = deadline


class RpcEventView:
    """``context._rpc_event``: the call's details and its request metadata,
    as grpcio's request-call event has them."""

    __slots__ = ("call_details", "invocation_metadata")

    def __init__(self, context: _Context) -> None:
        call = context._call
        authority = call.call_details().get("authority", "")
        # time_remaining() counts down from 2**63 without a deadline.
        deadline = time.time() + context.time_remaining()
        self.call_details = CallDetailsView(call.method.encode(), authority.encode(), deadline)
        self.invocation_metadata: Tuple[Any, ...] = context.invocation_metadata()
