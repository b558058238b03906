"""Per-sender rate limits: a token bucket per broker user, checked before a request runs.

A sender is its AMQP ``user_id`` (the broker vouches for it), or its ``sender_id`` when
the message has none. Each gets ``rate`` requests a second on average and ``burst`` at
once; a request over that is answered ``rate_limited`` and not run, so one sender cannot
starve the others of an instance's slots. Buckets of senders quiet for long are dropped.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

__all__ = ["SenderRates"]

_MAX_SENDERS: Final = 10_000


class SenderRates:
    """Token buckets per sender: ``allow`` takes a token, or says how long until one."""

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_senders: int = _MAX_SENDERS,
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._max = max_senders
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at

    def allow(self, sender: str) -> float:
        """Take a token of ``sender``'s; return 0.0, or the seconds until one is there."""
        now = self._clock()
        tokens, at = self._buckets.pop(sender, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        wait = 0.0
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            wait = (1.0 - tokens) / self.rate
        self._buckets[sender] = (tokens, now)  # most recent last
        if len(self._buckets) > self._max:
            self._buckets.popitem(last=False)  # the quietest sender starts afresh
        return wait
