"""Many values at once into an OpenTelemetry SDK histogram.

OpenTelemetry's API records a histogram's values one call each (about 10 µs
in the Python SDK), which would cost the metrics bridge (_metrics.py) more
than the call it measures. For the SDK's own explicit-bucket aggregation
this adds a batch of values with one attribute set in one step, under the
aggregation's lock, exactly as that many record() calls would (same bucket
counts, sum, min and max; no exemplars, which need a sampled span that the
bridge's thread never has). Anything else (another SDK, another aggregation,
a layout this code doesn't know, an exemplar filter that samples every
value) goes through record(), value by value: the result is the same, only
slower.
"""

from __future__ import annotations

import logging
import sys
from bisect import bisect_left
from typing import Any, Callable, Dict, List, Optional, Sequence

_LOGGER = logging.getLogger(__name__)


# The SDK's exemplar filters under which the bridge's thread, which runs
# in no span, records no exemplar.
_NO_EXEMPLARS_HERE = ("TraceBasedExemplarFilter", "AlwaysOffExemplarFilter")


class BulkHistogram:
    """One histogram instrument of the SDK, recorded in batches."""

    def __init__(self, instrument: Any) -> None:
        self._instrument = instrument
        self._direct = True  # the SDK's layout is known; False after a surprise

    def record_many(self, values: Sequence[float], attributes: Dict[str, str]) -> None:
        if self._direct:
            try:
                if self._add_directly(values, attributes):
                    return
            except Exception:  # an SDK layout this code doesn't know
                _LOGGER.debug("pygrpc_native: recording values one by one into %r", self._instrument, exc_info=True)
            self._direct = False
        record = self._instrument.record
        for value in values:
            record(value, attributes)

    def _add_directly(self, values: Sequence[float], attributes: Dict[str, str]) -> bool:
        """Adds values to every aggregation of the instrument, or to none
        (False) when one of them isn't the SDK's explicit-bucket histogram:
        all are looked at before any is added to, as record() would then
        add the values to each."""
        matches = self._matches()
        if matches is None:
            return False
        aggregations = []
        for match in matches:
            keys = match._view._attribute_keys
            attrs = attributes if keys is None else {k: v for k, v in attributes.items() if k in keys}
            key = _key_function(match)(attrs)
            with match._lock:
                aggregation = match._get_or_create_aggregation(key, attrs)
            if type(aggregation).__name__ != "_ExplicitBucketHistogramAggregation":
                return False
            aggregations.append(aggregation)
        for aggregation in aggregations:
            _add(aggregation, values)
        return True

    def _matches(self) -> Optional[List[Any]]:
        """The view matches each reader aggregates this instrument with;
        None where values must go through record(): an exemplar filter
        that samples without a span (always_on) wants an exemplar of each."""
        consumer = self._instrument._measurement_consumer
        if getattr(self._instrument, "_meter_provider_disabled", False) or not hasattr(consumer, "_reader_storages"):
            return None
        exemplar_filter = getattr(getattr(consumer, "_sdk_config", None), "exemplar_filter", None)
        if exemplar_filter is not None and type(exemplar_filter).__name__ not in _NO_EXEMPLARS_HERE:
            return None
        matches: List[Any] = []
        for storage in list(consumer._reader_storages.values()):
            matches.extend(storage._get_or_init_view_instrument_match(self._instrument))
        return matches


def _key_function(match: Any) -> Callable[[Dict[str, str]], Any]:
    """How the SDK keys a match's aggregations by attributes."""
    hashed: Optional[Callable[[Dict[str, str]], Any]] = getattr(
        sys.modules[type(match).__module__], "_hash_attributes", None
    )
    if hashed is not None:
        return hashed
    return lambda attrs: frozenset(attrs.items())


def _add(aggregation: Any, values: Sequence[float]) -> None:
    """What len(values) aggregate() calls do, but the exemplars."""
    bounds = aggregation._boundaries
    counts = [0] * (len(bounds) + 1)
    for value in values:
        counts[bisect_left(bounds, value)] += 1
    total, low, high = sum(values), min(values), max(values)
    with aggregation._lock:
        if aggregation._value is None:
            aggregation._value = aggregation._get_empty_bucket_counts()
        current = aggregation._value
        for i, n in enumerate(counts):
            if n:
                current[i] += n
        aggregation._sum += total
        if aggregation._record_min_max:
            aggregation._min = min(aggregation._min, low)
            aggregation._max = max(aggregation._max, high)
