"""A plan you can look up: where it is while it runs, its aggregate once it has ended."""

from __future__ import annotations

import enum
import time
from collections import OrderedDict
from typing import Final, Literal

from pydantic import BaseModel, Field

from agentbus.envelopes import Question
from agentbus.leader._aggregate import Aggregate, SubtaskOutcome

__all__ = ["Cancellation", "PlanState", "RecentPlans", "RunState"]

_RECENT: Final = 1000  # finished plans a leader remembers, at most


class PlanState(BaseModel):
    """A plan as a leader knows it: ``running`` with each subtask so far, ``waiting`` (it
    parked: every step left waits for an answer, and no leader runs it until one comes),
    or ``ended`` with its aggregate."""

    plan_id: str
    state: Literal["running", "waiting", "ended"]
    leader: str
    done: int
    total: int
    subtasks: list[SubtaskOutcome]
    aggregate: Aggregate | None = None
    questions: list[Question] = Field(default_factory=list)
    """The plan's questions waiting for an answer (``agentbus answer ID ANSWER``)."""

    @classmethod
    def ended(cls, aggregate: Aggregate, leader: str) -> PlanState:
        """The state of a plan that has ended with ``aggregate``."""
        return cls(
            plan_id=aggregate.plan_id,
            state="ended",
            leader=leader,
            done=aggregate.totals.subtasks,
            total=aggregate.totals.subtasks,
            subtasks=aggregate.subtasks,
            aggregate=aggregate,
        )


class RecentPlans:
    """The aggregates of the plans this leader ended, kept ``retention`` seconds."""

    def __init__(self, retention: float, size: int = _RECENT) -> None:
        self._retention = retention
        self._size = size
        self._ended: OrderedDict[str, tuple[float, Aggregate]] = OrderedDict()

    def add(self, aggregate: Aggregate) -> None:
        """Remember an aggregate."""
        self._ended[aggregate.plan_id] = (time.monotonic(), aggregate)
        self._ended.move_to_end(aggregate.plan_id)
        while len(self._ended) > self._size:
            self._ended.popitem(last=False)

    def get(self, plan_id: str) -> Aggregate | None:
        """The aggregate of ``plan_id`` if it ended here within the retention time."""
        found = self._ended.get(plan_id)
        if found is None or time.monotonic() - found[0] > self._retention:
            return None
        return found[1]


class RunState(enum.Enum):
    """Where a plan runner is in its one run."""

    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    STOPPED = "stopped"
    PARKED = "parked"


class Cancellation(enum.Enum):
    """Why a run was cancelled from outside; the value is its ``stop_reason``."""

    REQUESTED = "the plan was cancelled by request"
    """A ``cancel`` request for the plan's ``run_plan`` request."""
    LEADER_STOPPING = "the leader is stopping"
    """The leader is stopping: the plan's work is cancelled with it."""
    HANDED_OVER = "the leader is stopping: the plan goes on under another"
    """The leader is stopping, and the durable plan goes on under another: its work runs on."""
