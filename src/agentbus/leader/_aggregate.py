"""What a plan run reports: per-subtask outcomes, the overall status, totals, progress."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Final

from pydantic import BaseModel, Field
from pydantic.dataclasses import dataclass

__all__ = [
    "PLAN_PROGRESS",
    "Aggregate",
    "PlanStatus",
    "Progress",
    "ProgressReport",
    "SubtaskOutcome",
    "SubtaskStatus",
    "Totals",
]

PLAN_PROGRESS: Final = "plan_progress"


class SubtaskStatus(enum.StrEnum):
    """Where a subtask is; the last four are terminal."""

    PENDING = "pending"
    RUNNING = "running"
    INPUT_REQUIRED = "input_required"
    """Waiting for the answer to a question (its agent's, or an approval step's)."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


class PlanStatus(enum.StrEnum):
    """How a plan ended."""

    COMPLETED = "completed"
    PARTIAL = "partial"
    FAILED = "failed"


# A slotted (pydantic) dataclass, not a model: a plan of 10,000 subtasks holds 10,000 of
# them, at 190 bytes each instead of a model's 1,340 (a model keeps a ``__dict__`` and a
# set of the fields given). ``Aggregate.model_dump`` dumps them; on their own,
# ``pydantic.TypeAdapter(SubtaskOutcome)`` or ``dataclasses.asdict`` does. The docstring
# is the schema's description: it stays about what the outcome is.
@dataclass(slots=True)
class SubtaskOutcome:
    """One subtask's end: status, result or error, attempts, agents and timings."""

    id: str
    skill: str
    status: SubtaskStatus = SubtaskStatus.PENDING
    result: Any = None
    error: dict[str, Any] | None = None
    attempts: int = 0
    agents: list[str] = Field(default_factory=list)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    duration: float | None = None
    usage: dict[str, float] | None = None
    """What the skill reported using for its answer, by unit (``report_usage``)."""
    items: dict[str, Any] | None = None
    """A mapped step's items: ``total``, the count of each way they ended
    (``succeeded``, ``failed``...), and the first ``failures`` (``index``, ``code``,
    ``message``); None for a step that is not mapped."""


class Totals(BaseModel):
    """Counts by status, wall time and the agents that worked on the plan."""

    subtasks: int
    succeeded: int = 0
    failed: int = 0
    skipped: int = 0
    cancelled: int = 0
    attempts: int = 0
    wall_time: float = 0.0
    agents_used: list[str] = Field(default_factory=list)
    usage: dict[str, float] = Field(default_factory=dict)
    """The subtasks' usage summed, by unit."""


class Aggregate(BaseModel):
    """The result of a plan: the leader's answer to ``run_plan``."""

    plan_id: str
    status: PlanStatus
    description: str = ""
    subtasks: list[SubtaskOutcome]
    totals: Totals
    started_at: datetime
    ended_at: datetime
    error: str | None = None

    def subtask(self, subtask_id: str) -> SubtaskOutcome:
        """Return the outcome of one subtask by id."""
        for outcome in self.subtasks:
            if outcome.id == subtask_id:
                return outcome
        raise KeyError(subtask_id)


class Progress(BaseModel):
    """One subtask transition; ``plan_progress`` events carry them in order."""

    plan_id: str
    subtask_id: str
    skill: str
    transition: str
    attempt: int
    agent_id: str | None = None
    error: dict[str, Any] | None = None
    detail: dict[str, Any] | None = None
    """``progress``: ``fraction`` and ``message``; ``partial``: ``seq`` and ``chunk``."""
    done: int
    total: int


class ProgressReport(BaseModel):
    """The ``event_data`` of a ``plan_progress`` event: the plan's latest transitions, in order."""

    plan_id: str
    done: int
    total: int
    transitions: list[Progress]
    request_id: str | None = None
    """The ``message_id`` of the ``run_plan`` request: broadcast ``cancel`` of it stops the plan."""
    outline: list[dict[str, Any]] | None = None
    """In the plan's first report: every subtask's ``id``, ``skill`` and ``depends_on``."""
