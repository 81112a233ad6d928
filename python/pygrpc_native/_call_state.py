"""CallState: one native call as its server and its handler's context see it.

The servers create one per call and hand it to the context, which is the
only way a context reaches the call: the front and the call id to ask Go
about it, and the fields the handler changes. The server reads the same
fields to end the call, so nothing is copied between the two, and a context
never needs to know which server runs it (server -> call -> context).

Under grpc.aio.server() a handler that is not a coroutine gets grpcio's sync
context; both contexts of such a call share its one CallState.

Slotted, since one is made per call: creating it is a handful of stores,
and ``callbacks`` stays a shared empty tuple until a handler adds one.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, Union

import grpc

if TYPE_CHECKING:
    from ._front import NativeGrpcFront


# What call_details() reports for a call first asked about after its end.
_ENDED_CALL_DETAILS: Dict[str, Any] = {"invocation_metadata": (), "peer": ""}

# The references a handler's context has. The servers count them before the
# handler runs and again once it has returned, before the answer: more then
# means the handler left its context to someone (a thread, a task, a closure,
# a bound method) who may read the call's details after the answer, when Go
# has forgotten the call; the server then keeps them (CallState.keep_details),
# as grpcio's contexts answer for as long as they live. Two counts per call
# cost well under a microsecond, where fetching every call's details would
# cost the front's zero-copy metadata; a false "more" (an exception's frames
# still alive, say) only fetches them.
context_refs = sys.getrefcount


class CallState:
    """One native call: how to reach it in Go, and what its handler set.

    ``callbacks`` is ``()`` until a handler adds one, a list while some
    wait, and None once they have run (later ones are refused). The sync
    server calls them without arguments; the aio server calls them with the
    call's context (grpc.aio's done callbacks).
    """

    __slots__ = (
        "front",
        "call_id",
        "method",
        "call_details_cache",
        "details_at",
        "serializer",
        "code",
        "details",
        "trailing_metadata",
        "initial_metadata_sent",
        "ended",
        "answered",
        "aborted",
        "callbacks",
        "gone_errors",
        "requests",
        "requests_ended",
    )

    def __init__(self, front: NativeGrpcFront, call_id: int, method: str) -> None:
        self.front = front  # serves the call
        self.call_id = call_id
        self.method = method  # the method's path, /service/name
        # call_details() of the Go core, asked on first use, and when
        # (time.monotonic(); its time_remaining counts from then).
        self.call_details_cache: Optional[Dict[str, Any]] = None
        self.details_at = 0.0
        # The serving handler's response serializer, once it is known.
        self.serializer: Optional[Callable[[Any], Any]] = None
        # The status code and details the handler set (None: not set);
        # details are bytes when a sync context set them, as grpcio keeps
        # them, and as given by an aio one.
        self.code: Optional[grpc.StatusCode] = None
        self.details: Union[str, bytes, None] = None
        self.trailing_metadata: Any = None  # None: not set
        self.initial_metadata_sent = False
        # The status has been sent, or the call is known to be gone.
        self.ended = False
        # The server sent the status (the sync server's; a request
        # iterator then ends rather than raising, as grpcio's).
        self.answered = False
        self.aborted = False  # the handler called abort()
        self.callbacks: Union[Tuple[()], List[Callable[..., None]], None] = ()
        # RpcErrors raised to the handler because the call was gone: if the
        # handler lets one through, it is not reported as the handler's.
        self.gone_errors: Tuple[grpc.RpcError, ...] = ()
        # The request stream an aio handler reads (context.read()); None for
        # a unary request.
        self.requests: Any = None
        # The handler read its request stream to the client's half-close
        # (grpcio's _state.client is "closed" from then on).
        self.requests_ended = False

    def gone_error(self) -> grpc.RpcError:
        """The grpc.RpcError grpcio raises to a handler that uses a call
        which has ended; remembered, so that if the handler lets it
        through, it isn't reported as the handler's own failure."""
        error = grpc.RpcError()
        self.gone_errors += (error,)
        return error

    def call_details(self) -> Dict[str, Any]:
        """The Go core's call_details(), asked once. Go keeps the details of
        a call that ended before it was answered (cancelled, deadline,
        aborted) for a while after its end; first asked once a call it has
        forgotten ended (or the server stopped), they are no metadata and
        no peer (see keep_details)."""
        details = self.call_details_cache
        if details is None:
            try:
                details = self.front.call_details(self.call_id)
                self.details_at = time.monotonic()
            except (LookupError, RuntimeError):
                details = _ENDED_CALL_DETAILS
            self.call_details_cache = details
        return details

    def keep_details(self) -> None:
        """Asks for the call's details now, while the call is live, so that
        a callback run after its end reads them from the context (the peer,
        the metadata, the auth context, the time left), as grpcio's
        contexts still answer then. Called when a handler adds a callback,
        by aio's abort() (the handler's code may go on), and before the
        answer of a call whose handler left its context to someone (see
        context_refs): other calls don't pay for it."""
        self.call_details()

    def time_remaining_kept(self, left: Optional[float]) -> Optional[float]:
        """left, what Go says of the time before the deadline (0.0 once the
        call has ended); for a call that has ended with its details kept,
        the time its deadline still has (None: no deadline), as grpcio's
        contexts keep counting after the end. A deadline that has passed
        reads as the int 0, as grpcio's max(deadline - now, 0) does."""
        if left != 0.0:
            return left
        details = self.call_details()  # the ended call's, if Go still has them
        if details is not _ENDED_CALL_DETAILS:
            kept = details["time_remaining"]
            if kept is None:
                return None
            left = kept - (time.monotonic() - self.details_at)
        return left if left is None or left > 0 else 0
