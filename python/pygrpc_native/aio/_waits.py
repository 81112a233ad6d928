"""What aio.server()'s calls wait for from Go, on the event loop.

Go tells the loop through the front's events: a request message
(EVENT_MESSAGE) or the end of a request stream (EVENT_HALF_CLOSE) of a
call whose handler reads its requests, and room in a call's buffer
(EVENT_ROOM, asked for with ``notify_room`` after a send found it full).
``LoopWaits`` routes them by call id to the futures the calls await: no
polling, and nothing registered for calls that wait for nothing.

A request stream lets Go read ahead of its handler while less than
``_AHEAD_BYTES`` and ``_AHEAD_MESSAGES`` (one message where the server
keeps grpcio's fixed windows: ``fixed_window``) wait for it, granting credit in
chunks sized by the messages seen so far (one grant in flight at a time):
a stream of small messages then crosses in batches, one loop wake-up for
many, and a client faster than its handler is held back by HTTP/2 flow
control once the handler stops taking messages.
"""

from __future__ import annotations

import asyncio
import collections
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Optional, Set

import grpc.aio

from .._events import EVENT_HALF_CLOSE, EVENT_MESSAGE, EVENT_ROOM

if TYPE_CHECKING:
    from .._call_state import CallState
    from .._front import NativeGrpcFront

# How far a request stream lets Go read ahead of its handler, and the
# largest grant of credit at once.
_AHEAD_BYTES = 64 << 10
_AHEAD_MESSAGES = 64
_GRANT = 16

FINISHED = "RPC already finished."


def check_open(call: "CallState", what: str) -> None:
    """grpc.aio's check before a handler's read, write or metadata: once
    abort() has run, its AbortError again; once the status is sent,
    UsageError(what)."""
    if call.aborted:
        raise grpc.aio.AbortError("Locally aborted.")
    if call.ended:
        raise grpc.aio.UsageError(what)


def server_stopped_error() -> Exception:
    """What grpc.aio's ops raise once its server's stop has ended the call."""
    from grpc._cython import cygrpc

    return cygrpc._ServerStoppedError("Server already stopped.")


class RequestStream:
    """One call's request stream on the loop: an async iterator and the
    source of ``context.read()``. Only the loop touches it.

    As on grpc.aio, a read checks the call before it starts and after it
    waited (check_open): once the call's status is sent (the handler
    returned, or aborted) a reader left running, a task of the handler's,
    gets grpc.aio's error rather than waiting for good, messages Go read
    ahead or not. Once the client has cancelled, a read that finds the
    stream ended gives the task's cancellation a turn of the loop to
    land, where grpc.aio's read would wait for Go."""

    __slots__ = (
        "_waits",
        "_call",
        "_deserializer",
        "_messages",
        "_bytes",
        "_granted",
        "_last_size",
        "_ended",
        "_waiter",
        "_iterating",
        "_cancelled",
        "_asked_past_end",
        "_iteration_over",
    )

    def __init__(self, waits: "LoopWaits", call: "CallState", deserializer: Optional[Callable[[bytes], Any]]) -> None:
        self._waits = waits
        self._call = call
        self._deserializer = deserializer
        self._messages: Deque[bytes] = collections.deque()
        self._bytes = 0  # of the messages queued
        self._granted = 0  # credit given and not used yet
        self._last_size = _AHEAD_BYTES  # unknown at first: one message
        self._ended = False  # the client half-closed (after the messages queued)
        self._waiter: Optional[asyncio.Future] = None
        self._iterating = False  # the read waiting (_waiter) is __anext__'s
        self._cancelled = False  # ended by the client's cancel
        self._asked_past_end = False  # see _past_end
        # The async iteration ended (the stream's end, an exception out of
        # a step, aclose()), as grpc.aio's async generator ends: later
        # steps stop at once; read() goes on.
        self._iteration_over = False
        self._top_up()

    def _top_up(self) -> None:
        """Grants credit for as many messages as the read-ahead allows, if
        no grant is out."""
        if self._granted or self._ended:
            return
        queued = len(self._messages)
        room = _AHEAD_BYTES - self._bytes
        ahead = self._waits.ahead_messages
        if room <= 0 or queued >= ahead:
            return
        n = min(_GRANT, ahead - queued, max(1, room // max(self._last_size, 1)))
        self._granted = n
        self._waits.credit(self._call.call_id, n)

    def arrived(self, payload: Optional[bytes]) -> None:
        """A message (None: the end of the stream) from Go."""
        if payload is None:
            self._ended = True
        else:
            self._messages.append(payload)
            size = len(payload)
            self._bytes += size
            self._last_size = size
            self._granted -= 1
            self._top_up()
        self.wake()

    def cancelled(self) -> None:
        """The client cancelled the call: the stream ends, and what it had
        sent and the handler had not read yet is dropped (grpc.aio's next
        read gives EOF)."""
        self._cancelled = True
        self._messages.clear()
        self._bytes = 0
        self.arrived(None)

    def wake(self) -> None:
        """Wakes the read waiting, if any: something arrived, or the call
        ended."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read(self) -> Any:
        """The next request, or grpc.aio.EOF after the last. A read made
        while another one waits gets EOF at once, as on grpc.aio (whose
        second receive fails as one operation too many); the one waiting
        gets the next request."""
        call = self._call
        check_open(call, FINISHED)
        if self._waits.stopping:
            self._waits.check_not_stopped(call.call_id)
        if self._cancelled and not self._messages:
            await asyncio.sleep(0)
        while not self._messages:
            if self._ended:
                self._past_end()
                return grpc.aio.EOF
            if self._waiter is not None:
                return grpc.aio.EOF
            await self._wait()
            check_open(call, FINISHED)
        return self._take()

    def _past_end(self) -> None:
        """The handler read past the stream's end: Go is asked for one
        message more, once. If the end stood for a message Go refused (over
        the size limit, undecodable: the front holds refusals), the call
        ends now with its status, and the task is cancelled at its next
        await, as grpc.aio's read gives EOF there and its call then ends;
        after a true half-close the credit changes nothing."""
        if not self._asked_past_end and not self._cancelled:
            self._asked_past_end = True
            self._waits.credit(self._call.call_id, 1)

    async def _wait(self) -> None:
        """Until a message or the end arrives."""
        self._waiter = self._waits.loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _take(self) -> Any:
        """The first queued request, deserialized."""
        message = self._messages.popleft()
        self._bytes -= len(message)
        self._top_up()
        deserializer = self._deserializer
        return message if deserializer is None else deserializer(message)

    def __aiter__(self) -> "RequestStream":
        return self

    async def __anext__(self) -> Any:
        # read(), without a coroutine of its own per message. grpc.aio's
        # iterator is an async generator: stepped while a step waits, it
        # raises (and goes on); once a step raised, or it ended, it stays
        # ended.
        if self._iteration_over:
            raise StopAsyncIteration()
        if self._waiter is not None and self._iterating:
            raise RuntimeError("anext(): asynchronous generator is already running")
        try:
            call = self._call
            check_open(call, FINISHED)
            if self._waits.stopping:
                self._waits.check_not_stopped(call.call_id)
            if self._cancelled and not self._messages:
                await asyncio.sleep(0)
            while not self._messages:
                if self._ended:
                    self._past_end()
                    raise StopAsyncIteration()
                if self._waiter is not None:
                    raise StopAsyncIteration()
                self._iterating = True
                try:
                    await self._wait()
                finally:
                    self._iterating = False
                check_open(call, FINISHED)
            return self._take()
        except BaseException:
            self._iteration_over = True
            raise

    async def aclose(self) -> None:
        """Ends the async iteration, as closing grpc.aio's async generator
        does (nothing more is read through it; read() goes on)."""
        self._iteration_over = True


class LoopWaits:
    """The calls that wait for something from Go, by call id."""

    __slots__ = ("loop", "ahead_messages", "stopping", "cancelled", "_front", "_streams", "_room")

    def __init__(self, loop: asyncio.AbstractEventLoop, front: NativeGrpcFront, fixed_window: bool = False) -> None:
        self.loop = loop
        # The server's stop() has begun: calls Go ends from now on, the
        # stop ended (its grace passed). Set by the server, on the loop.
        self.stopping = False
        # Calls whose task the server has cancelled for their end in Go
        # (EVENT_CANCEL), until the task is done. Only the loop touches it.
        self.cancelled: Set[int] = set()
        # How many messages a request stream may read ahead of its handler.
        self.ahead_messages = 1 if fixed_window else _AHEAD_MESSAGES
        self._front = front
        self._streams: Dict[int, RequestStream] = {}
        self._room: Dict[int, List[asyncio.Future]] = {}

    def check_not_stopped(self, call_id: int) -> None:
        """grpc.aio's check before a read, and before the status of a
        handler that returned: once its server is stopped (the stop's grace
        passed, its calls cancelled), _ServerStoppedError, which its server
        logs as a WARNING; the status is never sent. Ours: the stop has
        begun ending calls (stopping) and this one's task was cancelled for
        its end in Go."""
        if self.stopping and call_id in self.cancelled:
            raise server_stopped_error()

    def request_stream(self, call: "CallState", deserializer: Optional[Callable[[bytes], Any]]) -> RequestStream:
        """Starts delivering a call's request messages to a stream."""
        stream = RequestStream(self, call, deserializer)
        self._streams[call.call_id] = stream
        return stream

    def credit(self, call_id: int, n: int) -> None:
        try:
            self._front.request_messages(call_id, n)
        except RuntimeError:
            pass  # the server has stopped: the call has ended

    async def room(self, call_id: int) -> None:
        """Waits until the call's buffer has room, or the call ends
        (end_room). Every task waiting on one call (a writer the handler
        left running, and the handler's own status) is woken; Go is asked
        once to say when there is room."""
        waiters = self._room.get(call_id)
        if waiters is None:
            try:
                if not self._front.notify_room(call_id):
                    return  # room now, or the call has ended: the next send says which
            except RuntimeError:
                return  # the server has stopped: the next send says so
            waiters = self._room[call_id] = []
        waiter = self.loop.create_future()
        waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter.cancelled() and waiter in waiters:
                waiters.remove(waiter)  # this task was cancelled: the others still wait

    def on_event(self, kind: int, call_id: int, payload: Optional[bytes]) -> None:
        """Routes an EVENT_MESSAGE, EVENT_HALF_CLOSE or EVENT_ROOM."""
        if kind == EVENT_ROOM:
            self.end_room(call_id)
            return
        stream = self._streams.get(call_id)
        if stream is not None and kind in (EVENT_MESSAGE, EVENT_HALF_CLOSE):
            stream.arrived(payload if kind == EVENT_MESSAGE else None)

    def end_requests(self, call_id: int) -> bool:
        """Ends a call's request stream, as if the client had half-closed
        (grpc.aio's request iterator ends so when the call is cancelled);
        False if the call has none."""
        stream = self._streams.get(call_id)
        if stream is None:
            return False
        stream.cancelled()
        return True

    def end_room(self, call_id: int) -> bool:
        """Wakes the tasks waiting for room in a call: there is some, or the
        call has ended (their next send says so: grpc.aio's write fails
        before its task is cancelled). False if none waits."""
        waiters = self._room.pop(call_id, None)
        if not waiters:
            return False
        for waiter in waiters:
            waiter.set_result(None)
        return True

    def ended(self, call_id: int) -> None:
        """The call's status is sent: a read waiting wakes to learn it."""
        stream = self._streams.get(call_id)
        if stream is not None:
            stream.wake()

    def forget(self, call_id: int) -> None:
        """The call is over: nothing more is routed to it; a read still
        waiting (a task the handler left) wakes to learn it."""
        stream = self._streams.pop(call_id, None)
        if stream is not None:
            stream.wake()
