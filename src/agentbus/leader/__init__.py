"""The leader: plans of subtasks run over capable agents, with progress and aggregation."""

from agentbus._exceptions import NoCapableAgent
from agentbus.leader._aggregate import (
    PLAN_PROGRESS,
    Aggregate,
    PlanStatus,
    Progress,
    ProgressReport,
    SubtaskOutcome,
    SubtaskStatus,
    Totals,
)
from agentbus.leader._client import TASK_SUBTASK, PlanClient
from agentbus.leader._directory import SkillDirectory
from agentbus.leader._graph import PlanGraph, Skip, Stop
from agentbus.leader._leader import Leader
from agentbus.leader._plan import Plan, Subtask, resolve_input
from agentbus.leader._run import PlanRunner
from agentbus.leader._status import PlanState, RunState

__all__ = [
    "PLAN_PROGRESS",
    "TASK_SUBTASK",
    "Aggregate",
    "Leader",
    "NoCapableAgent",
    "Plan",
    "PlanClient",
    "PlanGraph",
    "PlanRunner",
    "PlanState",
    "PlanStatus",
    "Progress",
    "ProgressReport",
    "RunState",
    "SkillDirectory",
    "Skip",
    "Stop",
    "Subtask",
    "SubtaskOutcome",
    "SubtaskStatus",
    "Totals",
    "resolve_input",
]
