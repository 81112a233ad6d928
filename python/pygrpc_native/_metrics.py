"""gRFC A66 server metrics for server() and aio.server(): measured in Go.

Go measures every call (go/front/callmetrics.go) once a consumer is
configured; there are two:

* the ``grpc.pygrpc_native.metrics_address`` option: Go serves the metrics
  for Prometheus on that address, without Python;
* grpcio's OpenTelemetry plugin (``grpc_observability``), registered
  globally or as a context manager when the server is created, as
  grpc.server() looks for it: a thread of ours drains the ended calls'
  records from Go in batches and records them into the plugin's
  instruments (a batch at a time: _otel_bulk) while the plugin is
  registered, so handlers never pay for it.

Nothing is measured without either. A method is named in ``grpc.method``
when registered (``add_registered_method_handlers``, what generated code
does); every other call is ``other``, unless the
``grpc.pygrpc_native.metrics_all_methods`` option is 1 (then the Prometheus
endpoint names the first 1000 paths seen). For the plugin, as in grpcio, its
generic_method_attribute_filter decides whether a method not registered is
named (Go gives the first 1000 paths seen slots of their own whenever
per-call records are on).
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from ._otel_bulk import BulkHistogram

if TYPE_CHECKING:
    from ._front import NativeGrpcFront

_LOGGER = logging.getLogger(__name__)

METRICS_ADDRESS_OPTION = "grpc.pygrpc_native.metrics_address"
METRICS_ALL_METHODS_OPTION = "grpc.pygrpc_native.metrics_all_methods"

# grpc.status values: the status codes' canonical names, by code.
_STATUS_NAMES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
)  # fmt: skip

# pgn_metrics_record (go/capi/pgn.h): slot, code, duration_ns, sent, rcvd.
_RECORD = struct.Struct("<IIQQQ")
_BATCH_RECORDS = 4096
# How long the bridge waits in Go for a record before it looks at the
# started counts again (a call's start is counted without a record).
_DRAIN_WAIT_S = 0.25
# How long the bridge lets records gather after a batch that wasn't full:
# fewer, larger batches cost less per call (Go keeps up to 131,072 records
# between drains), and metrics are read far less often than this.
_GATHER_S = 0.1

_STARTED = "grpc.server.call.started"
_DURATION = "grpc.server.call.duration"
_SENT = "grpc.server.call.sent_total_compressed_message_size"
_RCVD = "grpc.server.call.rcvd_total_compressed_message_size"


def _option(options: Optional[Sequence[Any]], name: str) -> Any:
    """The first value of an option (as grpcio reads options), or None."""
    for key, value in options or ():
        if key == name or key == name.encode():
            return value
    return None


def _registered_plugins() -> List[Any]:
    """The OpenTelemetry plugins of grpcio's registered observability plugin
    whose stats are on, as grpc.server() finds them when it is created; []
    without grpc_observability or a plugin."""
    try:
        from grpc import _observability
    except ImportError:  # a grpcio without observability hooks
        return []
    with _observability.get_plugin() as plugin:
        if plugin is None or not plugin.stats_enabled:
            return []
        return list(getattr(plugin, "_plugins", ()))


class _Instruments:
    """One OpenTelemetry plugin's four server instruments, and what decides
    the attributes of what is recorded into them."""

    def __init__(self, plugin: Any, recorders: Sequence[Any]) -> None:
        self.plugin = plugin
        """The plugin they belong to: recorded into only while it is
        registered (as grpc.server(), which stops with deregister_global()
        and goes on when the same plugin is registered again)."""
        started, duration, sent, rcvd = recorders
        self.started = started
        self.duration = BulkHistogram(duration)
        self.sent = BulkHistogram(sent)
        self.rcvd = BulkHistogram(rcvd)
        settings = getattr(plugin, "_plugin", None)
        self.method_filter: Any = getattr(settings, "generic_method_attribute_filter", None)
        self.target_filter: Any = getattr(settings, "target_attribute_filter", None)
        # The label injectors of the plugin options active on a server
        # (grpcio activates them as its servers are made, never xDS here).
        self.injectors = [
            option.get_label_injector()
            for option in getattr(settings, "plugin_options", None) or ()
            if hasattr(option, "is_active_on_server")
            and option.is_active_on_server(False)
            and hasattr(option, "get_label_injector")
        ]

    def attributes(self, method: str, status: Optional[str]) -> Dict[str, str]:
        """A record's attributes, made as grpcio's plugin makes them: the
        method (as named for this plugin), the status (None for the started
        count), then the options' label injectors (the started count's
        without exchange labels) and the target filter's grpc.target.
        Injectors are asked again for each batch: their labels may change."""
        labels: Dict[Any, Any] = {"grpc.method": method}
        exchange = status is not None
        if exchange:
            labels["grpc.status"] = status
            for injector in self.injectors:
                if hasattr(injector, "deserialize_labels"):
                    labels = injector.deserialize_labels(labels)
        for injector in self.injectors:
            if hasattr(injector, "get_additional_labels"):
                labels.update(injector.get_additional_labels(exchange))
        out = {_text(key): _text(value) for key, value in labels.items()}
        if self.target_filter is not None and not self.target_filter(out.get("grpc.target", "")):
            out["grpc.target"] = "other"
        return out


def _text(value: Any) -> str:
    """An attribute key or value as the plugin writes it."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _instruments_of(plugin: Any) -> Optional[_Instruments]:
    """The plugin's server instruments; None when it has not all four (no
    meter provider)."""
    recorders = {r.name: r for r in getattr(plugin, "_metric_to_recorder", {}).values()}
    found = [recorders.get(name) for name in (_STARTED, _DURATION, _SENT, _RCVD)]
    if None in found:
        return None
    return _Instruments(plugin, found)


class ServerMetrics:
    """A server's metrics: enabled on its front when created, when a
    consumer is configured; the plugin bridge runs from start()."""

    def __init__(self, front: NativeGrpcFront, options: Optional[Sequence[Any]]) -> None:
        address = _option(options, METRICS_ADDRESS_OPTION)
        if isinstance(address, bytes):
            address = address.decode()
        if address is not None and not isinstance(address, str):
            raise TypeError(f"{METRICS_ADDRESS_OPTION} must be a str (host:port), not {type(address).__name__}")
        all_methods = _option(options, METRICS_ALL_METHODS_OPTION) == 1
        instruments = [i for i in map(_instruments_of, _registered_plugins()) if i is not None]
        self._front = front
        self._instruments = instruments
        self._registered: Set[str] = set()
        self.enabled = bool(address) or bool(instruments)
        self.port = 0
        """The Prometheus endpoint's port (0: none)."""
        if self.enabled:
            self.port = front._metrics_enable(address or None, all_methods=all_methods, records=bool(instruments))

    def register(self, path: str) -> None:
        """Names a registered method's calls."""
        if self.enabled:
            self._registered.add(path[1:] if path.startswith("/") else path)  # as Go names it
            self._front._metrics_register(path)

    def start(self) -> None:
        """Starts the plugin bridge (once the front serves)."""
        if self._instruments:
            bridge = _Bridge(self._front, self._instruments, frozenset(self._registered))
            threading.Thread(target=bridge.run, name="pygrpc_native-metrics", daemon=True).start()


class _Bridge:
    """Records the records Go hands over into the plugins' instruments until
    the front stops."""

    def __init__(self, front: NativeGrpcFront, instruments: List[_Instruments], registered: FrozenSet[str]) -> None:
        self._front = front
        self._instruments = instruments
        self._registered = registered
        self._names: List[str] = []  # by slot: each plugin's grpc.method values below
        self._methods: List[List[str]] = [[] for _ in instruments]
        self._started: List[int] = []  # by slot: started counts already added

    def run(self) -> None:
        try:
            while True:
                batch = self._front._metrics_drain(_BATCH_RECORDS, _DRAIN_WAIT_S)
                # What ended while no plugin of ours was registered is
                # drained and dropped, as grpc.server() drops it.
                live = {id(plugin) for plugin in _registered_plugins()}
                recorded = [p for p, i in enumerate(self._instruments) if id(i.plugin) in live]
                self._add_started(recorded)
                if batch is None:
                    return
                if batch and recorded:
                    self._record(batch, recorded)
                if len(batch) < _BATCH_RECORDS * _RECORD.size:
                    time.sleep(_GATHER_S)
        except Exception:  # a broken meter provider must not go unnoticed
            _LOGGER.exception("pygrpc_native: recording metrics into OpenTelemetry failed; metrics stop here")

    def _method_name(self, plugin: int, slot: int) -> str:
        names = self._methods[plugin]
        while len(names) <= slot:
            i = len(names)
            name = self._names[i]
            filt = self._instruments[plugin].method_filter
            if name != "other" and name not in self._registered and not (filt is not None and filt(name)):
                name = "other"
            names.append(name)
        return names[slot]

    def _add_started(self, recorded: List[int]) -> None:
        """Adds the calls started since the last batch to the plugins at
        the indexes recorded (into _instruments)."""
        counts = self._front._metrics_methods()
        if len(counts) > len(self._names):
            self._names = [name for name, _ in counts]
            self._started.extend([0] * (len(counts) - len(self._started)))
        for slot, (_name, started) in enumerate(counts):
            delta = started - self._started[slot]
            if delta:
                self._started[slot] = started
                for p in recorded:
                    instruments = self._instruments[p]
                    instruments.started.add(delta, instruments.attributes(self._method_name(p, slot), None))

    def _record(self, batch: bytes, recorded: List[int]) -> None:
        # Grouped by (method slot, code): each group's values go to the SDK
        # in one step per histogram (_otel_bulk).
        groups: Dict[Tuple[int, int], Tuple[List[float], List[float], List[float]]] = {}
        for slot, code, duration_ns, sent_bytes, rcvd_bytes in _RECORD.iter_unpack(batch):
            group = groups.get((slot, code))
            if group is None:
                group = groups[(slot, code)] = ([], [], [])
            group[0].append(duration_ns / 1e9)
            # floats, as grpcio's plugin records sizes (an exporter shows
            # a sum of 7 as 7.0 then)
            group[1].append(float(sent_bytes))
            group[2].append(float(rcvd_bytes))
        for p in recorded:
            instruments = self._instruments[p]
            for (slot, code), (durations, sent, rcvd) in groups.items():
                status = _STATUS_NAMES[code] if code < len(_STATUS_NAMES) else "UNKNOWN"
                attrs = instruments.attributes(self._method_name(p, slot), status)
                # The sizes before the durations, as grpcio's plugin gets
                # them: a reader that sees a call's duration sees its sizes
                # (and its start: _add_started ran before this batch).
                instruments.sent.record_many(sent, attrs)
                instruments.rcvd.record_many(rcvd, attrs)
                instruments.duration.record_many(durations, attrs)
