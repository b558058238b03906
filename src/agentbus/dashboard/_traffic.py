"""Traffic per service from the agents' own heartbeats: requests/s, errors by code, p50/p99.

Every heartbeat carries its agent's cumulative counts (``agentbus.agents`` ``Traffic``):
requests served, errors by code, handler latency buckets. The board keeps each agent's
beats of the last minutes and reads the differences: a rate over the last minute, and
errors and percentiles over the whole window. Percentiles are interpolated inside the
bucket they fall in, as Prometheus's ``histogram_quantile`` does.
"""

from __future__ import annotations

import collections
import itertools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from agentbus.agents import LATENCY_BUCKETS

__all__ = ["TrafficBoard"]

_WINDOW: Final = 300.0  # s of beats kept: errors and percentiles over this
_RATE_WINDOW: Final = 60.0  # s: requests per second over this
_NOTIFY_EVERY: Final = 1.0  # s: the page is told at most this often


@dataclass(frozen=True, slots=True)
class _Sample:
    at: float
    served: int
    errors: Mapping[str, int]
    buckets: tuple[int, ...]


class TrafficBoard:
    """Requests, errors and latency per service, from heartbeats handed to ``take``."""

    def __init__(
        self,
        *,
        on_change: Callable[[], None],
        window: float = _WINDOW,
        rate_window: float = _RATE_WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._on_change = on_change
        self._window = window
        self._rate_window = rate_window
        self._clock = clock
        self._samples: dict[str, collections.deque[_Sample]] = {}
        self._service: dict[str, str] = {}
        self._told = float("-inf")

    def take(self, agent_id: str, service: str, traffic: object) -> None:
        """Record the ``traffic`` of one heartbeat; ignore it when it is not well formed."""
        sample = _parse(traffic, self._clock())
        if sample is None:
            return
        samples = self._samples.get(agent_id)
        if samples is None:
            samples = self._samples[agent_id] = collections.deque()
        samples.append(sample)
        self._service[agent_id] = service
        # Keep one beat older than the window: the window's differences start from it.
        while len(samples) > 2 and samples[1].at <= sample.at - self._window:
            samples.popleft()
        if sample.at - self._told >= _NOTIFY_EVERY:
            self._told = sample.at
            self._on_change()

    def snapshot(self) -> dict[str, Any]:
        """Per service: requests/s (last minute), requests, errors, p50 and p99 (window)."""
        now = self._clock()
        totals: dict[str, _Totals] = {}
        for agent_id, samples in list(self._samples.items()):
            if now - samples[-1].at > self._window:
                del self._samples[agent_id]  # gone for the whole window
                continue
            service = totals.setdefault(self._service[agent_id], _Totals())
            service.instances += 1
            window = _since(samples, now - self._window)
            service.add(_sum(window))
            recent = _since(samples, now - self._rate_window)
            if len(recent) > 1:
                served = _sum(recent).served
                service.rate += served / (recent[-1].at - recent[0].at)
        return {
            "window": self._window,
            "rate_window": self._rate_window,
            "services": [totals[name].view(name) for name in sorted(totals)],
        }


@dataclass
class _Totals:
    instances: int = 0
    rate: float = 0.0
    served: int = 0

    def __post_init__(self) -> None:
        self.errors: collections.Counter[str] = collections.Counter()
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)

    def add(self, delta: _Sample) -> None:
        self.served += delta.served
        self.errors.update(delta.errors)
        for i, count in enumerate(delta.buckets):
            self.buckets[i] += count

    def view(self, service: str) -> dict[str, Any]:
        return {
            "service": service,
            "instances": self.instances,
            "rate": round(self.rate, 3),
            "requests": self.served,
            "errors": dict(self.errors),
            "error_count": sum(self.errors.values()),
            "p50": quantile(0.5, self.buckets),
            "p99": quantile(0.99, self.buckets),
        }


def quantile(q: float, buckets: list[int]) -> float | None:
    """The ``q`` quantile of a latency histogram (seconds), interpolated in its bucket."""
    total = sum(buckets)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(buckets):
        if count and seen + count >= rank:
            if i == len(LATENCY_BUCKETS):
                return LATENCY_BUCKETS[-1]  # above the last bound: say the bound
            lower = LATENCY_BUCKETS[i - 1] if i else 0.0
            upper = LATENCY_BUCKETS[i]
            return round(lower + (upper - lower) * (rank - seen) / count, 6)
        seen += count
    return LATENCY_BUCKETS[-1]


def _since(samples: collections.deque[_Sample], since: float) -> list[_Sample]:
    # The beats after ``since``, and the last one before it: differences start there.
    kept = [sample for sample in samples if sample.at > since]
    older = [sample for sample in samples if sample.at <= since]
    return older[-1:] + kept


def _sum(samples: list[_Sample]) -> _Sample:
    # Beat to beat, so that counts reset by a restart (same id) in between are not lost.
    served = 0
    errors: collections.Counter[str] = collections.Counter()
    buckets = [0] * (len(LATENCY_BUCKETS) + 1)
    for before, after in itertools.pairwise(samples):
        delta = _delta(before, after)
        served += delta.served
        errors.update(delta.errors)
        for i, count in enumerate(delta.buckets):
            buckets[i] += count
    return _Sample(samples[-1].at if samples else 0.0, served, errors, tuple(buckets))


def _delta(base: _Sample, newest: _Sample) -> _Sample:
    if newest.served < base.served:  # the agent restarted under the same id: counts reset
        return newest
    errors = {k: v - base.errors.get(k, 0) for k, v in newest.errors.items()}
    return _Sample(
        newest.at,
        newest.served - base.served,
        {k: v for k, v in errors.items() if v > 0},
        tuple(n - b for n, b in zip(newest.buckets, base.buckets, strict=True)),
    )


def _parse(traffic: object, at: float) -> _Sample | None:
    if not isinstance(traffic, Mapping):
        return None
    served, errors, buckets = traffic.get("served"), traffic.get("errors"), traffic.get("buckets")
    if not (
        type(served) is int
        and isinstance(errors, Mapping)
        and all(isinstance(k, str) and type(v) is int for k, v in errors.items())
        and isinstance(buckets, list)
        and len(buckets) == len(LATENCY_BUCKETS) + 1
        and all(type(n) is int for n in buckets)
    ):
        return None
    return _Sample(at, served, dict(errors), tuple(buckets))
