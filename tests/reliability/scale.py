"""How hard the probes push: the short run (CI, the default) or the long
one (PGN_RELIABILITY_LONG=1), as the issue sizes them."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Scale:
    name: str
    soak_seconds: float  # load and soak, per server
    soak_max_calls: int  # the soak ends early after this many calls
    disconnects: int  # clients vanishing mid-call, per server
    idle_connections: int  # connections that never finish the preface
    rapid_resets: int  # streams opened and reset at once, on one connection
    stalled_streams: int  # streams that never read their responses (each holds a sync worker)


SHORT = Scale("short", soak_seconds=12, soak_max_calls=1_000_000, disconnects=1_500, idle_connections=300,
              rapid_resets=2_000, stalled_streams=8)
LONG = Scale("long", soak_seconds=600, soak_max_calls=1_000_000, disconnects=10_000, idle_connections=2_000,
             rapid_resets=20_000, stalled_streams=32)


def current() -> Scale:
    return LONG if os.environ.get("PGN_RELIABILITY_LONG") == "1" else SHORT
