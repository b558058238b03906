"""A plan's limits as it runs: its deadline, its budget and what the answers used of it."""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime

from agentbus.envelopes import utcnow
from agentbus.leader._attempt import SubtaskError
from agentbus.leader._plan import Plan

__all__ = ["Limits"]


class Limits:
    """One run's deadline and budget, what its answers used, and the backoff between tries.

    Args:
        plan: The plan, for its budget (its deadline is given to ``start``).
        retry_base: Seconds before the second try; each next try waits twice as long.
        retry_cap: The longest wait between tries, in seconds.
        rng: The source of the jitter on each wait.
    """

    def __init__(
        self, plan: Plan, *, retry_base: float, retry_cap: float, rng: random.Random
    ) -> None:
        self._budget = plan.budget
        self._retry_base = retry_base
        self._retry_cap = retry_cap
        self._rng = rng
        self._deadline: datetime | None = None
        self._spent: Counter[str] = Counter()  # what the answers so far used, by unit

    def __repr__(self) -> str:
        return f"<Limits deadline={self._deadline} spent={dict(self._spent)}>"

    def start(self, deadline: datetime | None) -> None:
        """Count the time left until ``deadline`` from now on (None: the plan has none)."""
        self._deadline = deadline

    def seconds_left(self) -> float | None:
        """Return the seconds left before the deadline (0 once past it); None without one."""
        if self._deadline is None:
            return None
        return max((self._deadline - utcnow()).total_seconds(), 0.0)

    def spend(self, usage: dict[str, float]) -> None:
        """Count what an answer used, by unit."""
        self._spent.update(usage)

    def is_over_budget(self) -> bool:
        """Return whether one unit's cap is reached: then no attempt starts, as past the
        deadline."""
        budget = self._budget or {}
        return any(self._spent[unit] >= cap for unit, cap in budget.items())

    def over_budget(self) -> SubtaskError | None:
        """Return the error of an attempt the spent budget leaves no room for, or None."""
        if self._budget is None or not self.is_over_budget():
            return None
        return SubtaskError.over_budget(dict(self._spent), self._budget)

    def is_last_try(self, error: SubtaskError, attempts: int, retries: int) -> bool:
        """Whether a failed attempt is a step's last: its error is final, its retries are
        spent, or the plan's time or budget is."""
        spent = self.seconds_left() == 0 or self.is_over_budget()
        return error.is_final or attempts > retries or spent

    def backoff(self, attempts: int) -> float:
        """Return the seconds to wait before the try after ``attempts``, jittered, and no
        later than the deadline."""
        delay: float = min(self._retry_cap, self._retry_base * 2.0 ** (attempts - 1))
        delay *= self._rng.uniform(0.5, 1.5)
        left = self.seconds_left()
        return delay if left is None else min(delay, left)
