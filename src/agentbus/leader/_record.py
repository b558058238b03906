"""The run's record of each subtask, and the aggregate made of it at the end."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from agentbus.envelopes import utcnow
from agentbus.leader._aggregate import Aggregate, PlanStatus, SubtaskOutcome, SubtaskStatus, Totals
from agentbus.leader._attempt import SubtaskError
from agentbus.leader._plan import Plan

__all__ = ["SubtaskRecord", "tally"]

_TERMINAL: Final = frozenset(
    {SubtaskStatus.SUCCEEDED, SubtaskStatus.FAILED, SubtaskStatus.SKIPPED, SubtaskStatus.CANCELLED}
)


@dataclass(slots=True)
class SubtaskRecord:
    """A subtask's state during the run; its ``SubtaskOutcome`` comes at the end.

    Times are ``time.time()`` floats: a third of a datetime's memory, per subtask.
    """

    id: str
    skill: str
    status: SubtaskStatus = SubtaskStatus.PENDING
    result: Any = None
    error: SubtaskError | None = None
    attempts: int = 0
    agents: list[str] | None = None
    started: float | None = None
    ended: float | None = None
    usage: dict[str, float] | None = None
    items: dict[str, Any] | None = None
    """A mapped step's items: how many, how each ended, the first failures."""

    @property
    def is_settled(self) -> bool:
        """Return whether the subtask reached a terminal status."""
        return self.status in _TERMINAL

    def add_agent(self, agent_id: str) -> None:
        """Count ``agent_id`` among the agents that worked on the subtask."""
        if self.agents is None:
            self.agents = [agent_id]
        elif agent_id not in self.agents:
            self.agents.append(agent_id)

    def outcome(self) -> SubtaskOutcome:
        """Return the subtask's outcome, as the aggregate reports it."""
        duration = None
        if self.started is not None and self.ended is not None:
            duration = round(self.ended - self.started, 6)
        return SubtaskOutcome(
            id=self.id,
            skill=self.skill,
            status=self.status,
            result=self.result,
            error=None if self.error is None else self.error.to_wire(),
            attempts=self.attempts,
            agents=self.agents or [],
            started_at=_datetime(self.started),
            ended_at=_datetime(self.ended),
            duration=duration,
            usage=self.usage,
            items=self.items,
        )


def tally(
    plan: Plan,
    records: dict[str, SubtaskRecord],
    *,
    started_at: datetime,
    wall_time: float,
    error: str | None,
) -> Aggregate:
    """Return the plan's aggregate, emptying ``records`` as its outcomes are built.

    Each record makes way for its outcome as the list grows: the two never both hold
    every subtask at once.
    """
    counts = dict.fromkeys(SubtaskStatus, 0)
    agents: set[str] = set()
    usage: Counter[str] = Counter()
    attempts = 0
    not_met = 0  # steps whose condition did not hold: as complete as if they ran
    failed_critical = error is not None
    outcomes: list[SubtaskOutcome] = []
    for subtask in plan.subtasks:
        record = records.pop(subtask.id)
        counts[record.status] += 1
        not_met += record.error is not None and record.error.is_not_met
        attempts += record.attempts
        agents.update(record.agents or ())
        usage.update(record.usage or {})
        # Skipped work is partial; a critical subtask that failed (or a deadline) is failure.
        ended_badly = record.status in (SubtaskStatus.FAILED, SubtaskStatus.CANCELLED)
        failed_critical = failed_critical or (ended_badly and subtask.critical)
        outcomes.append(record.outcome())
    return Aggregate.model_construct(
        plan_id=plan.id,
        status=_status(failed_critical, counts[SubtaskStatus.SUCCEEDED] + not_met, len(outcomes)),
        description=plan.description,
        subtasks=outcomes,
        totals=Totals.model_construct(
            subtasks=len(outcomes),
            succeeded=counts[SubtaskStatus.SUCCEEDED],
            failed=counts[SubtaskStatus.FAILED],
            skipped=counts[SubtaskStatus.SKIPPED],
            cancelled=counts[SubtaskStatus.CANCELLED],
            attempts=attempts,
            wall_time=round(wall_time, 6),
            agents_used=sorted(agents),
            usage=dict(usage),
        ),
        started_at=started_at,
        ended_at=utcnow(),
        error=error,
    )


def _status(failed_critical: bool, succeeded: int, subtasks: int) -> PlanStatus:
    if failed_critical:
        return PlanStatus.FAILED
    if succeeded < subtasks:
        return PlanStatus.PARTIAL
    return PlanStatus.COMPLETED


def _datetime(timestamp: float | None) -> datetime | None:
    return None if timestamp is None else datetime.fromtimestamp(timestamp, UTC)
