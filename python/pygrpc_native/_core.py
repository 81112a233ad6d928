"""What server() and aio.server() share: the front, the handlers, routing.

Both servers keep the user's handlers and serve every kind of method
through the Go front. The routing rules live here, once:

* methods of registered handlers (grpcio-tools' generated code) are added
  to Go when the server starts;
* a path Go doesn't know arrives as EVENT_LOOKUP; the generic handlers are
  asked and the method is added to Go, so later calls go straight through.
  When every generic handler is grpcio's own dictionary
  (``grpc.method_handlers_generic_handler``, what generated code uses), the
  handler found then serves every later call: asking again would find the
  same. Any other generic handler may answer differently from call to call
  (its ``service()`` sees the call's metadata), so each call asks, as grpcio
  does;
* a path no handler knows is answered by the interceptors, if one of them
  answers it (the servers ask them at the lookup, for that call only:
  ``Lookup``), and UNIMPLEMENTED otherwise; it is looked up again on every
  call, since a generic handler may learn it later.
"""

from __future__ import annotations

import contextvars
import dataclasses
import enum
import math
import numbers
import threading
from concurrent import futures
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import grpc

from ._calls import DETAILS_METHOD_NOT_FOUND, _HandlerCallDetails, Method, behavior_of
from ._context import Metadatum
from ._credentials import set_front_tls, tls_config
from ._grpc_logs import SERVER_LOG
from ._metrics import ServerMetrics

if TYPE_CHECKING:
    from ._front import NativeGrpcFront


_UNKNOWN = grpc.StatusCode.UNKNOWN.value[0]
_UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED.value[0]


class Stage(enum.Enum):
    """Where a server is in its life; it only moves forward."""

    NEW = "new"  # created: handlers and ports may be added
    STARTED = "started"  # serving
    STOPPED = "stopped"  # stop() was called (it may still be finishing calls)


# The type of grpcio's own generic handler (grpc.method_handlers_generic_handler):
# it answers from a dict, so the handler it gives for a method is the one it
# would give on every call.
_DICTIONARY_HANDLER = type(grpc.method_handlers_generic_handler("pygrpc_native.probe", {}))

# How many paths answered call by call (by an interceptor, or a generic
# handler that isn't grpcio's dictionary one) Go learns for good, so that
# their next calls come without a lookup. Past that, such a call is routed
# to a method of its kinds shared by all of them (_SHARED_PATH), and its
# path's next call is looked up again: a client calling endless distinct
# paths that an interceptor answers (an auth check denying them) would
# otherwise grow both method tables by one per path, for good.
_PER_CALL_PATHS = 1000
_SHARED_PATH = "/pygrpc_native.internal.PerCall/{}"

# What grpcio raises for an address it can't resolve to bind: "", or a TCP
# address with no host (":50051", "[]:50051"; Go would take that as every
# interface). "::1" and "::" name a host: IPv6 addresses without a port.
_UNBINDABLE_ADDRESS_ERROR = (
    "Failed to bind to address {}; set GRPC_VERBOSITY=debug environment variable to see detailed error message."
)


def _names_no_host(address: str) -> bool:
    return address == "" or (address.startswith(":") and address.count(":") == 1) or address.startswith("[]")


def front_options(options: Optional[Sequence[Any]], compression: Optional[grpc.Compression]) -> List[Any]:
    """The options a server's front gets: the user's, with what grpcio
    does where the front's own defaults (those of the low-level API)
    differ. The first value of an option counts.

    * server(compression=...) is the option it stands for, added after the
      user's, as grpcio adds it (the user's own option wins);
    * SO_REUSEPORT is on unless ``grpc.so_reuseport`` is an integer of 0
      or less, as grpcio's servers bind (a value that isn't an integer
      leaves it on, the default); so 1 goes ahead of the user's options
      unless theirs is 0 or less."""
    result = list(options or ())
    if compression:
        # As grpcio: a false value adds nothing, and anything else is
        # int()'d (a grpc.Compression, or 2, 2.0, "2", True), with int()'s
        # own error for what it can't read. A number that names no
        # algorithm is refused by the option's check (grpcio logs it and
        # compresses nothing).
        result.append(("grpc.default_compression_algorithm", int(compression)))
    reuse_port = next((value for name, value in _named(result) if name == "grpc.so_reuseport"), None)
    if not (isinstance(reuse_port, int) and reuse_port <= 0):
        result.insert(0, ("grpc.so_reuseport", 1))
    return result


def fixed_window(options: Optional[Sequence[Any]]) -> bool:
    """Whether grpc.http2.bdp_probe is 0 (its first value, an int): the
    front then keeps grpcio's fixed receive windows (Go's
    Limits.FixedWindow), and a request stream is read only one message
    ahead of its handler, in Go and in aio.server() alike."""
    value = next((value for name, value in _named(options or ()) if name == "grpc.http2.bdp_probe"), None)
    return isinstance(value, int) and not isinstance(value, bool) and value == 0


def _named(options: Sequence[Any]) -> Iterable[Tuple[str, Any]]:
    """The (name, value) pairs of options, names as str; what isn't a pair
    is left for the front's own check to refuse."""
    for entry in options:
        if isinstance(entry, (tuple, list)) and len(entry) == 2:
            name, value = entry
            yield (name.decode("utf-8", "replace") if isinstance(name, bytes) else name), value


# The attribute that marks the methods of pygrpc_native.health's
# servicers, which a server answers in Go instead of calling them. It holds
# the function that, given such a method (bound to its servicer), the
# server's front and the path the method is served at, makes Go answer for
# the servicer, if Go can; so the servers need not know the health package,
# which builds on them.
NATIVE_HEALTH_HOOK = "_pygrpc_native_health"

NativeHealthHook = Callable[[Any, "NativeGrpcFront", str], None]


@dataclasses.dataclass(frozen=True)
class ServerArguments:
    """What grpc.server() and grpc.aio.server() take (the thread pool is
    grpc.aio's migration thread pool), checked as grpcio checks them."""

    thread_pool: Optional[futures.Executor]
    handlers: Optional[Sequence[grpc.GenericRpcHandler]]
    interceptors: Optional[Sequence[Any]]
    options: Optional[Sequence[Any]]
    maximum_concurrent_rpcs: Optional[int]
    compression: Optional[grpc.Compression]

    def __post_init__(self) -> None:
        if self.options is not None:
            # Read once, as grpcio's tuple(options): an iterator or a
            # generator is read here, not used up by the checks below.
            object.__setattr__(self, "options", tuple(self.options))
        check_option_values(self.options)


def check_option_values(options: Optional[Sequence[Any]]) -> None:
    """Refuses options as grpcio's servers do when they are created, with
    its exceptions: an entry that isn't a (name, value) pair, a value that
    is neither an int, str, bytes nor anything with __int__ (which grpcio
    takes as a pointer: a float, a numpy integer, a Decimal), an int that
    isn't a C int (grpcio reads it as a C long, then narrows it: each step
    has its words)."""
    for option in options or ():
        _name, value = option  # ValueError / TypeError as grpcio's unpacking
        if isinstance(value, int):
            if not -(2**63) <= value < 2**63:
                raise OverflowError("Python int too large to convert to C long")
            if not -(2**31) <= value < 2**31:
                raise OverflowError("value too large to convert to int")
        elif not isinstance(value, (str, bytes)) and not hasattr(value, "__int__"):
            raise TypeError(f"Expected int, bytes, or behavior, got {type(value)}")


# The largest limit of concurrent calls the front counts to (a C int, as
# grpc.aio's limiter takes).
_MAX_RPC_LIMIT = 2**31 - 1


def sync_rpc_limit(value: Any) -> Optional[int]:
    """grpc.server()'s maximum_concurrent_rpcs as a whole number of calls
    (None: no limit; 0: every call refused). grpcio refuses a call while
    its count of active ones is >= the value, so any real number works
    there: 2.5 lets 3 run, True 1, 0 or less none; infinity, NaN and
    counts no server reaches never refuse. Anything else is refused here
    with TypeError (grpcio takes it, and its serving thread dies at the
    first call, leaving every call waiting)."""
    if value is None:
        return None
    if not isinstance(value, numbers.Real):
        raise TypeError(f"maximum_concurrent_rpcs must be a number, got {value!r}")
    if math.isnan(value) or value > _MAX_RPC_LIMIT:
        return None
    return max(0, math.ceil(value))


def grace_of(grace: Any) -> Any:
    """A stop()'s grace as the front takes it: a negative number is no
    grace, as grpcio's servers take it (they wait that long, which is not
    at all); anything else as given (the front refuses what isn't a
    number)."""
    if isinstance(grace, numbers.Real) and grace < 0:
        return 0
    return grace


def aio_rpc_limit(value: Any) -> Optional[int]:
    """grpc.aio.server()'s maximum_concurrent_rpcs, converted and checked
    as grpc.aio's limiter does, with its exceptions: a number is truncated
    to an int (2.5 is 2; infinity OverflowError, NaN ValueError), anything
    else is TypeError, a C int's overflow OverflowError, and a limit below
    1 ValueError."""
    if value is None:
        return None
    if not isinstance(value, numbers.Real):
        raise TypeError("an integer is required")
    limit = int(value)
    if limit > _MAX_RPC_LIMIT:
        raise OverflowError("value too large to convert to int")
    if limit < 1:
        raise ValueError("maximum_concurrent_rpcs should be a positive integer")
    return limit


@dataclasses.dataclass(frozen=True)
class Lookup:
    """A looked-up call whose handler is found for this call alone: by the
    interceptors (for a path no handler knows, or any path that generic
    handlers answer call by call), or by those generic handlers.
    ``context`` is the call's contextvars.Context (see
    ServerCore.new_call_context): what the generic handlers' service() and
    the interceptors set in it, the handler sees."""

    call_id: int
    details: _HandlerCallDetails
    context: contextvars.Context


PreIntercepted = Tuple[grpc.RpcMethodHandler, contextvars.Context, str]
"""A looked-up call's handler, the Context its handler runs in, and its
path (the method it is routed to may be a shared one: _SHARED_PATH)."""


class ServerCore:
    """The routing half of a server; subclasses add dispatch and lifecycle."""

    # How the interceptors' continuation treats registered methods (see
    # continuation). grpc.server(): a registered method's call keeps its
    # handler whatever method the details name, and details naming another
    # method are answered by the generic handlers alone. grpc.aio.server():
    # registered handlers are asked as generic ones are.
    registered_fixed = True

    # The contextvars.Context a call's Python code starts in: its generic
    # handlers' service() (when they are asked per call), its interceptors
    # and its handler run in this one Context, as grpcio says of its
    # interceptors. grpc.server(): an empty one per call, so that what a
    # handler sets never leaks to the next call on its thread (grpcio's
    # _RPCState makes one). grpc.aio.server() overrides it: a copy of the
    # loop's, as a task starts with.
    new_call_context: Callable[[], contextvars.Context] = contextvars.Context

    def __init__(self, arguments: ServerArguments) -> None:
        """Creates the front and registers the handlers."""
        maximum_concurrent_rpcs = arguments.maximum_concurrent_rpcs
        # Created now, so that options this server refuses fail here; it is
        # bound by add_insecure_port. With a limit, a call counts until its
        # handler returns, as in grpcio (the servers say so: handler_done);
        # a refused request message ends its call when the handler reads up
        # to it, as in grpcio (aio's request streams, which take messages
        # as events, ask past the end: RequestStream).
        # Imported here, not with the module: loading the compiled core starts
        # the Go runtime, which must not happen before a process forks
        # (README: fork).
        from ._front import NativeGrpcFront

        self.front = NativeGrpcFront(
            "[::]:0",
            [],
            options=front_options(arguments.options, arguments.compression),
            resolve_unknown=True,
            maximum_concurrent_rpcs=maximum_concurrent_rpcs,
            hold_slots=maximum_concurrent_rpcs is not None,
            hold_refusals=True,
            raise_send_limit=True,
        )
        self.holds_slots = maximum_concurrent_rpcs is not None
        self.metrics = ServerMetrics(self.front, arguments.options)
        self.interceptors = tuple(arguments.interceptors or ())
        self.thread_pool = arguments.thread_pool
        self.methods: Dict[int, Method] = {}  # method id -> natively served method
        # Calls routed by a lookup that only an interceptor answered: call
        # id -> the handler it gave, the call's Context and its path, taken
        # by the call's runner.
        self.pre_intercepted: Dict[int, PreIntercepted] = {}
        # The paths answered call by call that Go knows (_PER_CALL_PATHS).
        self._per_call_paths: Set[str] = set()
        # grpcio asks its generic handlers on one thread, one call at a time:
        # a service() that isn't thread-safe (a cache it fills) stays safe.
        self._service_lock = threading.Lock()
        self._generic: List[grpc.GenericRpcHandler] = []
        # path -> handler; None (grpc.server() only): answered UNIMPLEMENTED
        self._registered: Dict[str, Optional[grpc.RpcMethodHandler]] = {}
        self.lock = threading.RLock()  # guards the handlers, the ports and the stage
        self.stage = Stage.NEW
        self.bound = False  # a port is bound
        if arguments.handlers:
            self.add_generic_rpc_handlers(arguments.handlers)

    # -- handlers ------------------------------------------------------------

    # grpc.server() refuses a generic handler without service() when it is
    # added, in its words (a space missing included); grpc.aio.server()
    # takes anything, and such a handler fails each call it is asked for.
    checks_generic_handlers = True

    def add_generic_rpc_handlers(self, generic_rpc_handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        handlers = list(generic_rpc_handlers)
        for handler in handlers if self.checks_generic_handlers else ():
            if getattr(handler, "service", None) is None:
                raise AttributeError(
                    f'"{handler}" must conform togrpc.GenericRpcHandler type but does not have "service" method!'
                )
        with self.lock:
            self._generic.extend(handlers)

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: Dict[str, grpc.RpcMethodHandler]
    ) -> None:
        with self.lock:
            if self.stage is not Stage.NEW:
                self.handler_log.warning("Cannot register method handlers once server has started")
                return
            for name, handler in method_handlers.items():
                # A None handler: grpc.server() answers the method's calls
                # UNIMPLEMENTED (kept, as None); grpc.aio asks the generic
                # handlers for them (left out).
                if handler is not None or self.registered_fixed:
                    self._registered[f"/{service_name}/{name}"] = handler

    def find_handler(self, details: grpc.HandlerCallDetails) -> Optional[grpc.RpcMethodHandler]:
        """The handler of the method details name: its registered one, else
        the first generic handler's that answers."""
        if details.method in self._registered:
            return self._registered[details.method]
        return self._find_generic(details)

    def _find_generic(self, details: grpc.HandlerCallDetails) -> Optional[grpc.RpcMethodHandler]:
        """The first generic handler's answer (None: none). Each is given
        details as they are, the object an interceptor passed on included
        (what it set on it, or a class of its own), as grpcio gives it."""
        with self._service_lock:
            for generic in list(self._generic):
                handler = generic.service(details)
                if handler is not None:
                    return handler
        return None

    def _asked_per_call(self, path: str) -> bool:
        """Whether the calls to path ask the handlers each time: a path no
        registered handler has, on a server with a generic handler other than
        grpcio's dictionary."""
        return path not in self._registered and any(type(g) is not _DICTIONARY_HANDLER for g in list(self._generic))

    def continuation(
        self, path: str, base: Optional[grpc.RpcMethodHandler]
    ) -> Callable[[grpc.HandlerCallDetails], Optional[grpc.RpcMethodHandler]]:
        """The interceptors' continuation for a call to ``path``, as grpcio's:
        the handlers are asked for the method that the details passed on
        name, so an interceptor may send a call to another method's handler,
        or to none. ``base``, the handler found for path itself (None where
        each call asks: see ``Method``), stands in for asking again while the
        details still name path, since asking would find the same."""
        if self.registered_fixed:
            if path in self._registered:
                registered = self._registered[path]
                return lambda _details: registered
            find = self._find_generic
        else:
            find = self.find_handler

        def ask(details: grpc.HandlerCallDetails) -> Optional[grpc.RpcMethodHandler]:
            if base is not None and details.method == path:
                return base
            return find(details)

        return ask

    def _add_method(self, path: str, handler: grpc.RpcMethodHandler, known: bool = True) -> int:
        """Serves a method natively; returns its method id. ``known``: the
        handler is the method's own (not one an interceptor answered with
        for one call)."""
        # Its kinds first: what isn't a handler fails on the attribute
        # grpc.aio reads first (the details name it).
        request_streaming, response_streaming = handler.request_streaming, handler.response_streaming
        # Only the behavior its kinds name: a handler class of the user's
        # may define no other (grpcio reads no other).
        behavior = behavior_of(handler)
        serve_health_natively: Optional[NativeHealthHook] = getattr(behavior, NATIVE_HEALTH_HOOK, None)
        if serve_health_natively is not None:
            # From now on Go may answer Check and Watch before the method
            # table is consulted; the method stays registered below only for
            # a call already routed here by a lookup.
            serve_health_natively(behavior, self.front, path)
        method_id = self.front.add_method(path, bool(response_streaming), bool(request_streaming))
        if known or method_id not in self.methods:
            self.methods[method_id] = Method(path, handler if known else None)
        return method_id

    def add_registered_methods(self) -> None:
        """Adds the registered handlers' methods to Go; called at start."""
        for path, handler in self._registered.items():
            if handler is None:
                continue  # answered UNIMPLEMENTED by lookup
            try:
                self._add_method(path, handler)
            except Exception:  # noqa: BLE001 - not a handler: its calls fail, the others are served
                # As grpc.aio.server(), which starts and fails each call of
                # such a method (lookup_failed, when lookup tries again).
                continue
            self.metrics.register(path)

    # Where the server's handler troubles are logged: grpcio's logger
    # (_grpc_logs); grpc.aio.server()'s is another.
    handler_log = SERVER_LOG

    def lookup_failed(self, call_id: int, path: str, exc: Exception) -> None:
        """Ends a call whose handler could not be found or served: a
        generic handler's service() or an interceptor raised exc, or gave
        something that isn't a handler (or a path or kinds the front
        refuses). Logged and answered as grpc.server() does (the aio server
        says it grpc.aio's way)."""
        SERVER_LOG.error("Exception servicing handler: %s", exc, exc_info=exc)
        self.reject(call_id, _UNKNOWN, "Error in service handler!")

    def lookup(self, call_id: int, path: str) -> Optional["Lookup"]:
        """Finds the handler of a path Go doesn't know yet (EVENT_LOOKUP)
        and routes the call to it. A path no handler knows is answered
        UNIMPLEMENTED, unless the server has interceptors: then it returns
        the Lookup the server finishes by running them (``intercepted``),
        as grpcio asks them even when no handler knows the path."""
        try:
            details = self.front.call_details(call_id)
        except (LookupError, RuntimeError):
            self.release_slot(call_id)
            return None  # the call ended while it waited
        metadata = tuple(Metadatum(k, v) for k, v in details["invocation_metadata"])
        lookup = Lookup(call_id, _HandlerCallDetails(path, metadata), self.new_call_context())
        per_call = self._asked_per_call(path)
        if per_call and self.interceptors:
            # The interceptors' continuation asks the handlers, once.
            return lookup
        try:
            handler = lookup.context.run(self.find_handler, lookup.details)
            if handler is not None and not per_call:
                self._route(call_id, self._add_method(path, handler))
                return None
        except Exception as exc:  # noqa: BLE001
            self.lookup_failed(call_id, path, exc)
            return None
        if handler is not None:
            self.intercepted(lookup, handler)
            return None
        if not self.interceptors:
            self.reject(call_id, _UNIMPLEMENTED, DETAILS_METHOD_NOT_FOUND)
            return None
        return lookup

    def intercepted(self, lookup: "Lookup", handler: Optional[grpc.RpcMethodHandler]) -> None:
        """Routes a looked-up call with the handler found for it alone (None:
        no one answers it); the handlers and interceptors are not asked again
        for this call (``pre_intercepted``), but are for each later one (the
        method's ``Method.handler`` is None)."""
        if handler is None:
            self.reject(lookup.call_id, _UNIMPLEMENTED, DETAILS_METHOD_NOT_FOUND)
            return
        path = lookup.details.method
        try:
            if path in self._per_call_paths or len(self._per_call_paths) < _PER_CALL_PATHS:
                method_id = self._add_method(path, handler, known=False)
                self._per_call_paths.add(path)
            else:
                kinds = (bool(handler.response_streaming), bool(handler.request_streaming))
                method_id = self._add_method(_SHARED_PATH.format("%d%d" % kinds), handler, known=False)
        except Exception as exc:  # noqa: BLE001 - not a handler, or one the front can't serve
            self.lookup_failed(lookup.call_id, path, exc)
            return
        self.pre_intercepted[lookup.call_id] = (handler, lookup.context, path)
        if not self._route(lookup.call_id, method_id):
            self.pre_intercepted.pop(lookup.call_id, None)
            self.release_slot(lookup.call_id)

    def _route(self, call_id: int, method_id: int) -> bool:
        try:
            return bool(self.front.route(call_id, method_id))
        except RuntimeError:
            return False  # the server has stopped

    def reject(self, call_id: int, code: int, details: str) -> None:
        """Ends a call Python took that no handler will run."""
        try:
            self.front.finish(call_id, code, details)
        except RuntimeError:
            pass  # the server has stopped
        self.release_slot(call_id)

    def is_live(self, call_id: int) -> bool:
        """Whether the client still waits for call_id, asked of Go just
        before its handler would start: a call reset or timed out after
        Python took it from the queue runs no handler, as in grpcio (one
        look at Go's call table). A call that isn't live is forgotten here;
        its slot is the caller's to free."""
        try:
            if self.front.is_active(call_id):
                return True
        except RuntimeError:
            pass  # the server has stopped: every call has ended
        self.pre_intercepted.pop(call_id, None)
        return False

    def release_slot(self, call_id: int) -> None:
        """No handler runs for a call Python took: with
        maximum_concurrent_rpcs, its place is free once it has ended."""
        if self.holds_slots:
            try:
                self.front.handler_done(call_id)
            except RuntimeError:
                pass  # the server has stopped

    # -- ports ---------------------------------------------------------------

    def add_insecure_port(self, address: str) -> int:
        """Binds one more address (TCP, ``unix:``, ``unix-abstract:``) and
        returns its port (1 for a Unix socket), as grpcio; the address may
        be UTF-8 bytes, as grpcio takes it."""
        if isinstance(address, bytes):
            address = address.decode("utf-8")
        with self.lock:
            if self.stage is not Stage.NEW:
                raise RuntimeError("ports must be added before the server starts")
            if _names_no_host(address):
                raise RuntimeError(_UNBINDABLE_ADDRESS_ERROR.format(address))
            try:
                port = self.front.bind(address)
            except (OSError, ValueError) as err:
                raise RuntimeError(f"Failed to bind to address {address}: {err}") from err
            self.bound = True
            return port

    def add_secure_port(self, address: str, server_credentials: grpc.ServerCredentials) -> int:
        """add_insecure_port with TLS for this port only."""
        if server_credentials is None:
            # grpcio fails here too (AttributeError); never a plaintext port.
            raise TypeError(
                "add_secure_port() needs server credentials, got None; for a plaintext port use add_insecure_port()"
            )
        tls_config(server_credentials, "add_secure_port()")  # TypeError for grpcio's credentials
        with self.lock:
            if self.stage is not Stage.NEW:
                return self.add_insecure_port(address)  # raises, as it does
            try:
                set_front_tls(self.front, server_credentials)
            except ValueError as err:
                # Key material grpcio's factory took unchecked: grpcio
                # refuses it here too, with this error.
                raise RuntimeError(f"Failed to bind to address {address}: {err}") from err
            try:
                return self.add_insecure_port(address)
            finally:
                set_front_tls(self.front, None)  # later ports are plaintext unless they say otherwise
