"""The one-line verdicts of report.py's summary table: for each probe, what
our servers showed (the worst of them) and what the controls showed."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

Results = Dict[str, Dict[str, Any]]  # kind -> the probe's figures

OURS = ("server", "aio", "lowlevel")
CONTROLS = ("grpc", "grpc_aio")


def _split(results: Results) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    return ([f for k, f in results.items() if k in OURS], [f for k, f in results.items() if k in CONTROLS])


def _worst(figures: List[Dict[str, Any]], key: str) -> Any:
    values = [f[key] for f in figures if f.get(key) is not None]
    return max(values) if values else None


Figures = List[Dict[str, Any]]


def _both_sides(line: Callable[[Figures], str]) -> Callable[[Results], Tuple[str, str]]:
    """The verdict that sums up our servers' figures and the controls' the
    same way, with line."""

    def verdict(r: Results) -> Tuple[str, str]:
        ours, theirs = _split(r)
        return line(ours), line(theirs)

    return verdict


def load(r: Results) -> Tuple[str, str]:
    def line(fs: List[Dict[str, Any]]) -> str:
        return (f"{sum(f['calls'] for f in fs):,} calls, {sum(f['failed'] for f in fs)} failed; "
                f"RSS +{_worst(fs, 'rss_growth_pct')} % at most once warm, threads +{_worst(fs, 'threads_added')}")

    ours, theirs = _split(r)
    return line(ours) + f", goroutines +{_worst(ours, 'goroutines_added')}", line(theirs)


@_both_sides
def disconnects(fs: Figures) -> str:
    leaked = _worst(fs, "leaked_calls")
    return (f"{sum(f['clients'] for f in fs):,} clients gone mid-call: "
            + (f"{leaked} calls leaked, " if leaked is not None else "")
            + f"{sum(f['callbacks_missing'] for f in fs)} callbacks missing, "
            f"RSS {_worst(fs, 'rss_growth_pct'):+} % at most, live call {_worst(fs, 'live_call_s')} s")


def _by(key: str, fmt: str) -> Callable[[Results], Tuple[str, str]]:
    return _both_sides(lambda fs: fmt.format(_worst(fs, key)))


@_both_sides
def continuation(fs: Figures) -> str:
    sent, peak = _worst(fs, "sent_kib"), _worst(fs, "rss_peak_growth_kib")
    closed = all(f["server_closed_connection"] for f in fs)
    return (f"connection closed after {sent:,} KiB at most" if closed else "not cut off") + (
        f"; peak RSS +{peak:,} KiB at most")


@_both_sides
def stalled(fs: Figures) -> str:
    return (f"{_worst(fs, 'rss_kib_per_stream')} KiB per stalled stream, "
            f"{_worst(fs, 'cpu_ms_per_s_stalled')} ms CPU per second while stalled")


@_both_sides
def wide_stalled(fs: Figures) -> str:
    return f"RSS +{_worst(fs, 'rss_growth_mib')} MiB, live call {_worst(fs, 'live_call_s')} s"


@_both_sides
def ping_flood(fs: Figures) -> str:
    stopped = all(f["server_stopped_reading"] for f in fs)
    return (f"RSS +{_worst(fs, 'rss_growth_mib')} MiB, "
            + ("stopped reading" if stopped else "read every PING")
            + f", live call {_worst(fs, 'live_call_s')} s")


@_both_sides
def rapid_reset(fs: Figures) -> str:
    return (f"{_worst(fs, 'handlers_run')} of {_worst(fs, 'streams_reset'):,} handlers ran at most, "
            f"{_worst(fs, 'cpu_us_per_reset')} µs CPU per reset call; still serving")


@_both_sides
def max_rpcs(fs: Figures) -> str:
    bursts = {", ".join(f"{n} {code}" for code, n in f[k].items()) for f in fs for k in ("first burst", "second burst")}
    return "each burst of 10 (limit 4): " + " / ".join(sorted(bursts))


def metrics(r: Results) -> Tuple[str, str]:
    ms = [f["metrics"] for k, f in r.items() if k in OURS]
    adds_up = all(m["calls_started"] == m["calls_completed"] + m["calls_cancelled"] + m["calls_deadline_exceeded"]
                  + m["calls_active"] and m["calls_active"] == 1 and m["connections_active"] == 1 for m in ms)
    started = sum(m["calls_started"] for m in ms)
    return (f"{started:,} calls started; counters {'add up' if adds_up else 'do NOT add up'}, "
            "nothing left active", "– (grpcio has no metrics())")


def h2spec(r: Results) -> Tuple[str, str]:
    extra = sorted({c for f in r.values() for c in f["failures grpc-go doesn't have"]})
    worst = max(f["grpc-go cases failed"] for f in r.values())
    return (f"failing where grpc-go passes: {', '.join(extra) or 'none'} ({len(r)} run{'s' if len(r) > 1 else ''})",
            f"grpc-go: {worst} of 145 failed, the reference")


# The control each of ours answers like.
_CONTROL_OF = {"server": "grpc", "aio": "grpc_aio", "lowlevel": "grpc"}


def _answers(f: Dict[str, Any], ignore: Tuple[str, ...] = ()) -> Any:
    skip = ("live_call_s", "alive", *ignore)
    return f.get("outcomes") or {k: v for k, v in f.items() if k not in skip}


def same_as_control(r: Results, ignore: Tuple[str, ...] = ()) -> Tuple[str, str]:
    """Each of ours compared with its grpcio control, or with grpc-go where
    it ran (malformed frames)."""
    grpc_go = "grpcgo" in r
    pairs = {k: ("grpcgo" if grpc_go else _CONTROL_OF[k]) for k in r if k in OURS}
    same = all(_answers(r[k], ignore) == _answers(r[c], ignore) for k, c in pairs.items() if c in r)
    alive = all(r[k].get("alive", True) for k in pairs)
    n = len(_answers(next(iter(r.values())), ignore))
    reference = "grpc-go's" if grpc_go else "grpcio's"
    ours = f"{n} cases, answers {'identical to' if same else 'differ from'} {reference}" + (
        "" if alive else "; a server died")
    controls = [k for k in r if k in CONTROLS]
    differ = sum(_answers(r[k], ignore) != _answers(r["grpcgo"], ignore) for k in controls) if grpc_go else 0
    theirs = f"{n} cases" + (f"; grpcio's servers answer {differ} of {len(controls)} sets unlike grpc-go" if grpc_go else "")
    return ours, theirs


def tls(r: Results) -> Tuple[str, str]:
    ours, theirs = same_as_control(r, ignore=("random ClientHello",))
    return ours + " (a garbage ClientHello gets a TLS alert, grpcio just closes)", theirs


def handler_faults(r: Results) -> Tuple[str, str]:
    ours, theirs = same_as_control(r, ignore=("returns the wrong type",))
    return ours + " (a str response: server() answers UNKNOWN, grpc.server() never answers)", theirs


@_both_sides
def stop(fs: Figures) -> str:
    return (f"exit codes {sorted({f['exit_code'] for f in fs})}, {sum(f['clients_stuck'] for f in fs)} clients "
            f"stuck, stopped within {_worst(fs, 'stop_s')} s")


def queued(r: Results) -> Tuple[str, str]:
    def line(f: Dict[str, Any]) -> str:
        return f"{f['handlers_run']} of {f['calls']} handlers ran; live call {f['live_call_s']} s"

    return line(r["server"]), line(r["grpc"])


VERDICTS: Dict[str, Callable[[Results], Tuple[str, str]]] = {
    "Load and soak": load,
    "Disconnects": disconnects,
    "Idle connections": _by("live_p99_ms", "live calls p99 {} ms"),
    "Rapid reset": rapid_reset,
    "CONTINUATION flood (NULs)": continuation,
    "CONTINUATION flood (fields)": continuation,
    "Stalled streams": stalled,
    "Stalled streams, wide windows": wide_stalled,
    "PING flood, acks never read": ping_flood,
    "Over the limits": same_as_control,
    "Malformed frames": same_as_control,
    "Handler faults": handler_faults,
    "Stop under load": stop,
    "Calls reset while queued": queued,
    "TLS": tls,
    "maximum_concurrent_rpcs": max_rpcs,
    "Metrics after a storm": metrics,
    "h2spec": h2spec,
}
