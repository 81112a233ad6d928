"""The kinds of events recv_batch() returns, and the method id of the relay.

Plain Python values, so that ``import pygrpc_native`` needs no compiled core:
the Go runtime starts only when the first front is made (``_front``), and a
process that imported the package but never served can still fork children
that serve (README: fork). ``_front`` checks these against the compiled
core's own values when it loads.
"""

from typing import Optional, Tuple

EVENT_CALL = 1
"""A call arrived (its request as payload, none for a client-streaming method)."""
EVENT_CANCEL = 2
"""A call ended before it was answered: client cancel, deadline, reset."""
EVENT_LOOKUP = 3
"""A call to a path no method is registered for (``resolve_unknown=True``)."""
EVENT_MESSAGE = 4
"""A request message of a client-streaming call (request_messages)."""
EVENT_HALF_CLOSE = 5
"""The client of a client-streaming call sent its last message."""
EVENT_ROOM = 6
"""A call's buffer has room again (notify_room)."""
FALLBACK = -1
"""The method id that route() uses to relay a call to the fallback server."""

Event = Tuple[int, int, int, Optional[bytes], Optional[str]]
"""(kind, call_id, method_id, payload, client_key)"""
