"""A schedule: a plan or a request run every N seconds, on a cron expression, or once.

Ticks are whole milliseconds since the epoch (UTC), so a tick is the same number on every
leader: it names the run (``<schedule>-<tick time>``) and keys the journal's records.
Cron expressions are read by ``cronsim`` (Debian cron's rules, daylight saving time
included) in the schedule's time zone (``zoneinfo``).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from agentbus.envelopes import AgentId
from agentbus.leader._plan import Plan

__all__ = ["MAX_CATCH_UP", "Due", "Schedule", "ScheduledRequest", "tick_label"]

ScheduleName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,100}$")]
MAX_CATCH_UP: Final = 1000
"""The most missed ticks a schedule whose policy is ``all`` runs when a leader gets to it."""
_MAX_TICKS: Final = 20_000  # due ticks looked at in one go: older ones count as skipped


class ScheduledRequest(BaseModel):
    """A request a schedule sends: fire and forget, or as a task (a plan of one subtask,
    run by a leader, with a status to look up under the run's id)."""

    model_config = ConfigDict(extra="forbid")

    service: AgentId
    action: AgentId
    parameters: dict[str, Any] = Field(default_factory=dict)
    task: bool = Field(
        default=False, description="Run it as a task (through a leader: it has a status)."
    )
    timeout: float = Field(default=30.0, gt=0, description="Seconds per attempt, as a task.")


class Schedule(BaseModel):
    """A plan or a request run on a schedule (every N seconds, a cron expression in a
    time zone) or once (at a time, or after a delay), by the leaders, each tick once."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: ScheduleName
    description: str = ""
    every: float | None = Field(
        default=None, ge=0.05, le=366 * 86400, description="Seconds between two ticks."
    )
    start: datetime | None = Field(
        default=None,
        description=(
            "With every: the first tick (default: whole periods from the epoch, the first "
            "after it was added: every 300 s ticks at :00, :05, :10...)."
        ),
    )
    cron: str | None = Field(
        default=None,
        description="A cron expression (minute hour day month weekday), in the time zone tz.",
    )
    at: datetime | None = Field(
        default=None, description="Once, at this time (no offset: in the time zone tz)."
    )
    in_: float | None = Field(
        default=None, alias="in", ge=0, description="Once, this many seconds after it is added."
    )
    tz: str = Field(default="UTC", description="The IANA time zone of cron and of at.")
    missed: Literal["skip", "once", "all"] = Field(
        default="once",
        description=(
            "Ticks missed while no leader ran (later than grace): skip drops them; once "
            "runs the latest of them; all runs each, oldest first (the latest catch_up)."
        ),
    )
    grace: float = Field(
        default=5.0, ge=0, le=3600, description="Seconds late a tick still runs as on time."
    )
    catch_up: int = Field(default=100, ge=1, le=MAX_CATCH_UP)
    plan: Plan | None = Field(default=None, description="The plan each tick runs.")
    request: ScheduledRequest | None = Field(
        default=None, description="The request each tick sends."
    )

    @model_validator(mode="after")
    def _check(self) -> Schedule:
        kinds = [k for k in ("every", "cron", "at", "in_") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("give exactly one of every, cron, at and in")
        if (self.plan is None) == (self.request is None):
            raise ValueError("give exactly one of plan and request")
        try:
            zone = ZoneInfo(self.tz)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {self.tz!r}") from exc
        if self.cron is not None:
            try:
                CronSim(self.cron, datetime.now(zone))
            except CronSimError as exc:
                raise ValueError(f"invalid cron expression {self.cron!r}: {exc}") from exc
        if self.at is not None and self.at.tzinfo is None:
            self.at = self.at.replace(tzinfo=zone)
        if self.start is not None and self.start.tzinfo is None:
            self.start = self.start.replace(tzinfo=zone)
        return self

    @property
    def is_once(self) -> bool:
        """Whether it runs once (``at``, ``in``), and goes once it has."""
        return self.at is not None or self.in_ is not None

    def fixed(self, added: float) -> Schedule:
        """This schedule as added at ``added`` (epoch seconds): ``in`` becomes ``at``."""
        if self.in_ is None:
            return self
        at = datetime.fromtimestamp(added, UTC) + timedelta(seconds=self.in_)
        return self.model_copy(update={"in_": None, "at": at})

    def next_tick(self, after: int, added: int) -> int | None:
        """The first tick strictly after ``after`` (ms), for a schedule added at ``added``."""
        return next(self._ticks(after, added), None)

    def due(self, last: int | None, added: int, now: int) -> Due:
        """The ticks to run at ``now`` (ms): those since ``last`` (or since it was added),
        the missed ones (later than ``grace``) under the ``missed`` policy."""
        after = last if last is not None else (added if not self.is_once else -1)
        behind = 0
        if self.every is not None:  # jump ahead: no need to walk a long outage tick by tick
            period = max(round(self.every * 1000), 1)
            behind = max((now - after) // period - _MAX_TICKS, 0)
            after += behind * period
        ticks: collections.deque[int] = collections.deque(maxlen=_MAX_TICKS)
        total = behind
        for tick in self._ticks(after, added):
            if tick > now:
                break
            ticks.append(tick)
            total += 1
        late = now - math.ceil(self.grace * 1000)
        on_time = [t for t in ticks if t >= late]
        kept = self._kept([t for t in ticks if t < late])
        through = ticks[-1] if ticks else None
        skipped = total - len(kept) - len(on_time)
        return Due(kept + on_time, skipped=skipped, through=through, caught_up=len(kept))

    def _kept(self, missed: list[int]) -> list[int]:
        # The missed ticks that run, under the policy.
        if self.missed == "skip":
            return []
        if self.missed == "once":
            return missed[-1:]
        return missed[-self.catch_up :]

    def _ticks(self, after: int, added: int) -> Iterator[int]:
        # The ticks strictly after ``after``, in order.
        if self.every is not None:
            period = max(round(self.every * 1000), 1)
            first = _ms(self.start) if self.start is not None else (added // period + 1) * period
            tick = first if after < first else first + ((after - first) // period + 1) * period
            while True:
                yield tick
                tick += period
        elif self.cron is not None:
            local = datetime.fromtimestamp(after / 1000, ZoneInfo(self.tz))
            for at in CronSim(self.cron, local):
                yield _ms(at)
        else:
            once = _ms(self.at) if self.at is not None else added
            if once > after:
                yield once


class Due:
    """The ticks a schedule runs now, and how many missed ones it drops."""

    __slots__ = ("caught_up", "skipped", "through", "ticks")

    def __init__(
        self, ticks: list[int], *, skipped: int, through: int | None = None, caught_up: int = 0
    ) -> None:
        self.ticks = ticks
        self.skipped = skipped
        self.caught_up = caught_up
        """How many of ``ticks`` (the first ones) were missed, and run by the policy."""
        self.through = through
        """The latest tick looked at (run or not): the next look starts after it."""

    def __repr__(self) -> str:
        return f"<Due ticks={len(self.ticks)} skipped={self.skipped}>"


def tick_label(tick: int) -> str:
    """The tick as it goes in a run's id: ``20261201T093000Z`` (``...T093000250Z`` for a
    tick off the whole second)."""
    at = datetime.fromtimestamp(tick / 1000, UTC)
    millis = tick % 1000
    return at.strftime("%Y%m%dT%H%M%S") + (f"{millis:03d}" if millis else "") + "Z"


def _ms(at: datetime | None) -> int:
    assert at is not None
    return round(at.timestamp() * 1000)
