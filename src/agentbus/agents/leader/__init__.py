"""The leader: plans of subtasks run over capable agents, with progress and aggregation."""

from agentbus.agents.leader._aggregate import (
    PLAN_PROGRESS,
    Aggregate,
    PlanStatus,
    Progress,
    ProgressReport,
    SubtaskOutcome,
    SubtaskStatus,
    Totals,
)
from agentbus.agents.leader._client import PlanClient
from agentbus.agents.leader._directory import NoCapableAgent, SkillDirectory
from agentbus.agents.leader._leader import Leader
from agentbus.agents.leader._plan import Plan, Subtask, resolve_input
from agentbus.agents.leader._run import PlanRunner

__all__ = [
    "PLAN_PROGRESS",
    "Aggregate",
    "Leader",
    "NoCapableAgent",
    "Plan",
    "PlanClient",
    "PlanRunner",
    "PlanStatus",
    "Progress",
    "ProgressReport",
    "SkillDirectory",
    "Subtask",
    "SubtaskOutcome",
    "SubtaskStatus",
    "Totals",
    "resolve_input",
]
