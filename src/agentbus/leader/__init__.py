"""The leader: plans of subtasks run over capable agents, with progress and aggregation;
schedules that run plans and requests."""

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
from agentbus.leader._schedule import Schedule, ScheduledRequest
from agentbus.leader._schedule_book import ScheduleListing, ScheduleRun, ScheduleState
from agentbus.leader._status import PlanState, RunState
from agentbus.leader._ticker import SCHEDULE_CHANGED, SCHEDULE_FIRED

__all__ = [
    "PLAN_PROGRESS",
    "SCHEDULE_CHANGED",
    "SCHEDULE_FIRED",
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
    "Schedule",
    "ScheduleListing",
    "ScheduleRun",
    "ScheduleState",
    "ScheduledRequest",
    "SkillDirectory",
    "Skip",
    "Stop",
    "Subtask",
    "SubtaskOutcome",
    "SubtaskStatus",
    "Totals",
    "resolve_input",
]
