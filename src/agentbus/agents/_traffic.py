"""What an agent served, told in its heartbeats: requests, errors by code, latency buckets.

The counts are cumulative since the agent started, so a lost beat loses nothing: a
reader (the dashboard) takes the difference between two beats for a rate, and adds the
buckets of a service's instances up for its percentiles. No Prometheus is needed.
"""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Any, Final

from agentbus.bus import LatencyObserver

__all__ = ["LATENCY_BUCKETS", "Traffic"]

LATENCY_BUCKETS: Final = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
"""Upper bounds (seconds) of the handler latency buckets; one more bucket holds the rest."""


class Traffic:
    """Counts the requests an agent serves; passes every timing on to ``then`` (metrics)."""

    def __init__(self, then: LatencyObserver | None = None) -> None:
        self._then = then
        self.served = 0
        self.errors: Counter[str] = Counter()
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)

    def observe_request(self, action: str, outcome: str, seconds: float) -> None:
        if self._then is not None:
            self._then.observe_request(action, outcome, seconds)

    def observe_handler(self, action: str, outcome: str, seconds: float) -> None:
        self.served += 1
        if outcome != "success":
            self.errors[outcome] += 1
        self.buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        if self._then is not None:
            self._then.observe_handler(action, outcome, seconds)

    def report(self) -> dict[str, Any]:
        """The ``traffic`` of a heartbeat: ``served``, ``errors`` by code, ``buckets``."""
        return {"served": self.served, "errors": dict(self.errors), "buckets": list(self.buckets)}
