"""What server() and aio.server() share: the front, the handlers, routing.

Both servers keep the user's handlers, serve unary-request methods natively
and everything else through a grpcio server of their own kind (grpc.server
or grpc.aio.server) on a Unix socket, the *fallback*. The routing rules live
here, once:

* methods of registered handlers (grpcio-tools' generated code) are added
  to Go when the server starts;
* a path Go doesn't know arrives as EVENT_LOOKUP; the generic handlers are
  asked (their ``service()`` runs once more for that call) and the method is
  added to Go, so later calls go straight through;
* methods that stream requests, and paths no handler knows, go to the
  fallback (unknown paths are looked up again on every call, since a
  generic handler may learn them later).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
from concurrent import futures
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

import grpc

from ._calls import HandlerCallDetails, Method
from ._context import Metadatum
from ._credentials import set_front_tls, tls_config
from ._fallback_dir import FallbackDir
from ._front import FALLBACK, NativeGrpcFront

_LOGGER = logging.getLogger("pygrpc_native")

_UNKNOWN = grpc.StatusCode.UNKNOWN.value[0]


class Stage(enum.Enum):
    """Where a server is in its life; it only moves forward."""

    NEW = "new"  # created: handlers and ports may be added
    STARTED = "started"  # serving
    STOPPED = "stopped"  # stop() was called (it may still be finishing calls)


# What grpcio raises for add_insecure_port("").
_EMPTY_ADDRESS_ERROR = "Failed to bind to address ; set GRPC_VERBOSITY=debug environment variable to see detailed error message."

# Options Go applies to the clients' connections, for native and fallback
# calls alike; the fallback's grpcio server doesn't get them, since its only
# client is Go's private connection, and aging or limiting that connection
# would cut fallback calls on a schedule the client's connection doesn't
# have. (Compression options it does get: Go relays the encoding of each of
# its answers and messages, see go/front/compression.go.)
_FRONT_ONLY_OPTIONS = frozenset(
    (
        "grpc.max_connection_age_ms",
        "grpc.max_connection_age_grace_ms",
        "grpc.max_connection_idle_ms",
        "grpc.max_allowed_incoming_connections",
    )
)


def with_compression(options: Optional[Sequence[Any]], compression: Optional[grpc.Compression]) -> List[Any]:
    """grpcio's server(compression=...) as the option it stands for, after
    the user's, as grpcio adds it: the same option in ``options`` wins (the
    first value of an option counts)."""
    result = list(options or ())
    if compression is not None:
        if not isinstance(compression, grpc.Compression):
            raise TypeError(f"compression must be a grpc.Compression, not {type(compression).__name__}")
        result.append(("grpc.default_compression_algorithm", int(compression.value)))
    return result


def fallback_options(options: Sequence[Any]) -> List[Any]:
    """The options of the fallback's grpcio server: the user's, less those
    Go applies for it (_FRONT_ONLY_OPTIONS)."""
    return [o for o in options if not (isinstance(o, (tuple, list)) and len(o) == 2 and _name(o[0]) in _FRONT_ONLY_OPTIONS)]


def _name(name: Any) -> Any:
    """An option's name as str: grpcio takes bytes names too."""
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else name


# The attribute that marks the methods of pygrpc_native.health's
# servicers, which a server answers in Go instead of calling them. It holds
# the function that, given such a method (bound to its servicer) and the
# server's front, makes Go answer for the servicer, if Go can; so the
# servers need not know the health package, which builds on them.
NATIVE_HEALTH_HOOK = "_pygrpc_native_health"

NativeHealthHook = Callable[[Any, NativeGrpcFront], None]


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
        if self.maximum_concurrent_rpcs is not None and self.maximum_concurrent_rpcs < 1:
            raise ValueError("maximum_concurrent_rpcs should be a positive integer")


class ServerCore:
    """The routing half of a server; subclasses add dispatch and lifecycle."""

    def __init__(self, create_fallback: Callable[..., Any], arguments: ServerArguments) -> None:
        """Creates the front, and the fallback with ``create_fallback``
        (grpc.server or grpc.aio.server, called with grpcio's arguments);
        registers the handlers on both."""
        maximum_concurrent_rpcs = arguments.maximum_concurrent_rpcs
        interceptors = arguments.interceptors
        front_options = with_compression(arguments.options, arguments.compression)
        # The fallback's socket lives in a directory only this user can
        # enter, removed on stop or at exit (_fallback_dir says who may).
        self._fallback_dir = FallbackDir(self)
        self.remove_fallback_dir = self._fallback_dir.remove
        socket_path = self._fallback_dir.socket_path
        self.fallback_address = "unix:" + socket_path  # for the grpcio server
        # Created now, so that options this server refuses fail here; it is
        # bound by add_insecure_port.
        self.front = NativeGrpcFront(
            "[::]:0",
            [],
            options=front_options,
            resolve_unknown=True,
            maximum_concurrent_rpcs=maximum_concurrent_rpcs,
            fallback="unix://" + socket_path,  # for grpc-go's client
        )
        self.fallback = create_fallback(
            arguments.thread_pool,
            interceptors=interceptors,
            options=fallback_options(front_options),
            maximum_concurrent_rpcs=maximum_concurrent_rpcs,
        )
        self.interceptors = tuple(interceptors or ())
        self.thread_pool = arguments.thread_pool
        self.methods: Dict[int, Method] = {}  # method id -> natively served method
        self._generic: List[grpc.GenericRpcHandler] = []
        self._registered: Dict[str, grpc.RpcMethodHandler] = {}  # path -> handler
        self.lock = threading.RLock()  # guards the handlers, the ports and the stage
        self.stage = Stage.NEW
        self.bound = False  # a port is bound
        if arguments.handlers:
            self.add_generic_rpc_handlers(arguments.handlers)

    # -- handlers ------------------------------------------------------------

    def add_generic_rpc_handlers(self, generic_rpc_handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        handlers = list(generic_rpc_handlers)
        for handler in handlers:
            if getattr(handler, "service", None) is None:
                raise AttributeError(
                    f'"{handler}" must conform to grpc.GenericRpcHandler type but does not have "service" method!'
                )
        with self.lock:
            self._generic.extend(handlers)
            self.fallback.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: Dict[str, grpc.RpcMethodHandler]
    ) -> None:
        with self.lock:
            if self.stage is not Stage.NEW:
                _LOGGER.warning("Cannot register method handlers once server has started")
                return
            for name, handler in method_handlers.items():
                self._registered[f"/{service_name}/{name}"] = handler
            self.fallback.add_registered_method_handlers(service_name, method_handlers)

    def _find_handler(self, path: str, metadata: Any) -> Optional[grpc.RpcMethodHandler]:
        handler = self._registered.get(path)
        if handler is not None:
            return handler
        details = HandlerCallDetails(path, metadata)
        for generic in list(self._generic):
            handler = generic.service(details)
            if handler is not None:
                return handler
        return None

    def _add_method(self, path: str, handler: grpc.RpcMethodHandler) -> int:
        """Serves a method natively, or through the fallback if it streams
        requests; returns its method id (FALLBACK for the latter)."""
        if handler.request_streaming:
            self.front.add_fallback_method(path)
            return FALLBACK
        behavior = handler.unary_unary or handler.unary_stream
        serve_health_natively: Optional[NativeHealthHook] = getattr(behavior, NATIVE_HEALTH_HOOK, None)
        if serve_health_natively is not None:
            # From now on Go may answer Check and Watch before the method
            # table is consulted; the method stays registered below only for
            # a call already routed here by a lookup.
            serve_health_natively(behavior, self.front)
        method_id = self.front.add_method(path, handler.response_streaming)
        self.methods[method_id] = Method(path, handler)
        return method_id

    def add_registered_methods(self) -> None:
        """Adds the registered handlers' methods to Go; called at start."""
        for path, handler in self._registered.items():
            self._add_method(path, handler)

    def lookup_failure_details(self, exc: Exception) -> str:
        """The status details of a call whose generic handler's service()
        raised exc: grpcio's sync server says this; grpc.aio's differs."""
        return "Error in service handler!"

    def lookup(self, call_id: int, path: str) -> None:
        """Finds the handler of a path Go doesn't know yet (EVENT_LOOKUP)
        and routes the call: natively, or to the fallback."""
        try:
            details = self.front.call_details(call_id)
        except LookupError:
            return  # the call ended while it waited
        metadata = tuple(Metadatum(k, v) for k, v in details["invocation_metadata"])
        try:
            handler = self._find_handler(path, metadata)
        except Exception as exc:  # noqa: BLE001
            _LOGGER.exception("Exception servicing handler")
            self.front.finish(call_id, _UNKNOWN, self.lookup_failure_details(exc))
            return
        method_id = FALLBACK if handler is None else self._add_method(path, handler)
        self.front.route(call_id, method_id)

    # -- ports ---------------------------------------------------------------

    def add_insecure_port(self, address: str) -> int:
        """Binds one more address (TCP, ``unix:``, ``unix-abstract:``) and
        returns its port (1 for a Unix socket), as grpcio."""
        with self.lock:
            if self.stage is not Stage.NEW:
                raise RuntimeError("ports must be added before the server starts")
            if address == "":
                raise RuntimeError(_EMPTY_ADDRESS_ERROR)
            try:
                port = self.front.bind(address)
            except (OSError, ValueError) as err:
                raise RuntimeError(f"Failed to bind to address {address}: {err}") from err
            self.bound = True
            return port

    def add_secure_port(self, address: str, server_credentials: grpc.ServerCredentials) -> int:
        """add_insecure_port with TLS for this port only. TLS ends at the
        native server: fallback calls reach the grpcio server behind it in
        plaintext, over its private Unix socket (docs/tls.md)."""
        tls_config(server_credentials, "add_secure_port()")  # TypeError for grpcio's credentials
        with self.lock:
            if self.stage is not Stage.NEW:
                return self.add_insecure_port(address)  # raises, as it does
            set_front_tls(self.front, server_credentials)
            try:
                return self.add_insecure_port(address)
            finally:
                set_front_tls(self.front, None)  # later ports are plaintext unless they say otherwise
