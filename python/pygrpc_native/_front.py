"""NativeGrpcFront: the low-level API, a thin layer over the compiled core.

Everything per call (recv_batch, respond, send_message, finish, ...) is a
method of the C type and runs without any Python code in between; this
module only turns the constructor's arguments into the configuration the Go
core reads. See docs/low-level-api.md.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple, Union

from . import _native
from ._credentials import hold_credentials, tls_config, update_front_tls
from . import _events


def _check_core_constants() -> None:
    """The package's constants (``_events``) and the compiled core's must
    agree: they differ only when the Python files and the extension come
    from different builds."""
    names = ("EVENT_CALL", "EVENT_CANCEL", "EVENT_LOOKUP", "EVENT_MESSAGE", "EVENT_HALF_CLOSE", "EVENT_ROOM", "FALLBACK")
    ours = {name: getattr(_events, name) for name in names}
    core = {name: getattr(_native, name) for name in names}
    if ours != core:
        raise ImportError(
            f"pygrpc_native's compiled core ({_native.__file__}) does not match its Python files "
            f"(constants {core} against {ours}); reinstall pygrpc-native"
        )


_check_core_constants()


def _option_value(value: Any) -> Any:
    # An option's value as Go reads it: integers and strings (bytes as
    # UTF-8, as grpcio reads them) go as they are; grpcio takes any other
    # value (a float, a numpy integer: anything with __int__) as a pointer,
    # which no server option reads: None, which Go ignores.
    if isinstance(value, int):
        return int(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str):
        return str(value)
    return None


# A method entry: (path, server_streaming) or (path, server_streaming,
# client_streaming), a tuple or a list; checked at run time (_config_json).
MethodEntry = Union[Tuple[str, bool], Tuple[str, bool, bool], Sequence[Any]]


def _config_json(
    address: str,
    methods: Iterable[MethodEntry],
    options: Optional[Sequence[Tuple[str, Any]]],
    bearer_tokens: Optional[Mapping[str, str]],
    ordered: bool,
    resolve_unknown: bool,
    maximum_concurrent_rpcs: Optional[int],
    fallback: Optional[str],
    credentials: Any = None,
    hold_slots: bool = False,
    hold_refusals: bool = False,
    raise_send_limit: bool = False,
) -> str:
    if not isinstance(address, str):
        raise TypeError(f"address must be a str, not {type(address).__name__}")
    method_list = []
    for entry in methods:
        if not (isinstance(entry, tuple) or isinstance(entry, list)) or len(entry) not in (2, 3):
            raise TypeError(f"methods must be (path, server_streaming[, client_streaming]) tuples, got {entry!r}")
        path, *kinds = entry
        if not isinstance(path, str) or not all(isinstance(k, bool) for k in kinds):
            raise TypeError(f"methods must be (str, bool[, bool]) tuples, got {entry!r}")
        method_list.append([path, *kinds])
    option_list = []
    for entry in options or ():
        if not (isinstance(entry, tuple) or isinstance(entry, list)) or len(entry) != 2:
            raise TypeError(f"options must be (name, value) pairs, got {entry!r}")
        name, value = entry
        if isinstance(name, bytes):
            # As grpcio. A name that isn't UTF-8 is no option anyone knows,
            # and unknown options are ignored.
            name = name.decode("utf-8", "replace")
        if not isinstance(name, str):
            raise TypeError(f"option names must be str or bytes, got {name!r}")
        option_list.append([name, _option_value(value)])
    tokens = {}
    if bearer_tokens is not None and not isinstance(bearer_tokens, Mapping):
        raise TypeError(f"bearer_tokens must be a mapping of token to client key, not {type(bearer_tokens).__name__}")
    for token, key in (bearer_tokens or {}).items():
        if not isinstance(token, str) or not isinstance(key, str):
            raise TypeError("bearer_tokens must map str tokens to str client keys")
        if not token:
            raise ValueError("bearer tokens must not be empty")
        tokens[token] = key
    if fallback is not None and not isinstance(fallback, str):
        raise TypeError(f"fallback must be a gRPC target str, not {type(fallback).__name__}")
    if maximum_concurrent_rpcs is not None and (
        not isinstance(maximum_concurrent_rpcs, int) or isinstance(maximum_concurrent_rpcs, bool)
    ):
        raise ValueError(f"maximum_concurrent_rpcs must be an int, got {maximum_concurrent_rpcs!r}")
    # Go's 0 is no limit, and its negative limit refuses every call.
    if maximum_concurrent_rpcs is None:
        limit = 0
    else:
        limit = maximum_concurrent_rpcs if maximum_concurrent_rpcs > 0 else -1
    tls = tls_config(credentials, "NativeGrpcFront(credentials=...)")
    return json.dumps(
        {
            "address": address,
            "methods": method_list,
            "options": option_list,
            "bearer_tokens": tokens,
            "ordered": bool(ordered),
            "resolve_unknown": bool(resolve_unknown),
            "maximum_concurrent_rpcs": limit,
            "hold_slots": bool(hold_slots),
            "hold_refusals": bool(hold_refusals),
            "raise_send_limit": bool(raise_send_limit),
            "fallback": fallback or "",
            "tls": tls,
        }
    )


class NativeGrpcFront(_native.Front):
    """A gRPC server in Go whose calls reach Python as events.

    ``methods`` lists the methods served natively as ``(path,
    server_streaming)`` pairs, or ``(path, server_streaming,
    client_streaming)`` triples; a method's index is the ``method_id`` its
    events carry, and ``add_method`` adds more later. A client-streaming
    method's EVENT_CALL has no payload: its messages follow under credit
    (``request_messages`` as EVENT_MESSAGE events, or ``read_message``). Other paths are
    answered UNIMPLEMENTED by Go, or with ``resolve_unknown=True`` arrive as
    EVENT_LOOKUP events for Python to ``route`` or ``finish``.
    ``maximum_concurrent_rpcs`` refuses native calls over that many active
    ones with RESOURCE_EXHAUSTED (0 or less: every call, as grpc.server());
    with ``hold_slots=True`` a call Python took counts until
    ``handler_done(call_id)`` as well as until it ends. With
    ``hold_refusals=True`` a request message Go refuses (over the size
    limit, undecodable) on a stream taken as events comes as its
    EVENT_HALF_CLOSE, and the call ends with the refusal's status at the
    next ``request_messages`` (which returns False), as grpcio ends it
    when its handler reads that message. With ``raise_send_limit=True``
    ``respond``, ``send_message`` and ``finish`` raise ``SendLimitError``
    (a ValueError) for a message over ``grpc.max_send_message_length``,
    whose call Go ends with RESOURCE_EXHAUSTED all the same (without it they
    return True, and only the client learns). ``fallback`` is the gRPC target (e.g.
    ``"unix:///path/to/sock"``) of a server that gets, relayed by Go, the
    calls Python routes to ``FALLBACK``, the methods added with
    ``add_fallback_method``, and (without ``resolve_unknown``) every unknown
    path. ``credentials`` (grpcio's server credentials, made after
    ``pygrpc_native`` was imported, or ``pygrpc_native.ssl_server_credentials()``)
    serves TLS or local credentials; ``call_details()`` then reports the
    client's identity, and ``update_credentials()`` rotates TLS key material.
    ``health=True`` answers ``grpc.health.v1.Health``'s Check and Watch in
    Go, before any event reaches Python, from a status table that
    ``set_health()`` updates (``enable_health()`` does the same later).
    """

    def __init__(
        self,
        address: str,
        methods: Iterable[MethodEntry],
        options: Optional[Sequence[Tuple[str, Any]]] = None,
        bearer_tokens: Optional[Mapping[str, str]] = None,
        ordered: bool = False,
        resolve_unknown: bool = False,
        maximum_concurrent_rpcs: Optional[int] = None,
        fallback: Optional[str] = None,
        credentials: Optional[Any] = None,
        health: bool = False,
        hold_slots: bool = False,
        metrics_address: Optional[str] = None,
        metrics_all_methods: bool = False,
        hold_refusals: bool = False,
        raise_send_limit: bool = False,
    ) -> None:
        methods = tuple(methods)  # read twice: a generator is read once
        super().__init__(
            _config_json(
                address,
                methods,
                options,
                bearer_tokens,
                ordered,
                resolve_unknown,
                maximum_concurrent_rpcs,
                fallback,
                credentials,
                hold_slots,
                hold_refusals,
                raise_send_limit,
            )
        )
        hold_credentials(self, credentials)
        self.address = address
        self.metrics_port = 0
        """The Prometheus endpoint's port (0: none)."""
        if metrics_address is not None:
            if not isinstance(metrics_address, str) or not metrics_address:
                raise TypeError(f"metrics_address must be a non-empty str (host:port), not {metrics_address!r}")
            self.metrics_port = self._metrics_enable(metrics_address, all_methods=bool(metrics_all_methods))
            for path, *_kinds in methods:
                self._metrics_register(path)
        if health:
            self.enable_health()

    def update_credentials(self, configuration: Any) -> None:
        """Replaces the key material of the TLS ports while serving: new
        connections get it, connections already made keep theirs. Takes
        ``grpc.ssl_server_certificate_configuration(...)`` or
        ``pygrpc_native.ssl_server_credentials(...)`` (its pairs and roots;
        whether client certificates are required stays as created).
        ValueError for key material that can't be served (the current
        stays)."""
        update_front_tls(self, configuration)

    def name_in_metrics(self, path: str) -> None:
        """Names a method's calls in the metrics' ``grpc.method`` (e.g. one
        added with ``add_method``); only with ``metrics_address``."""
        self._metrics_register(path)

    def __repr__(self) -> str:
        return f"<NativeGrpcFront {self.address!r} port={self.port}>"
