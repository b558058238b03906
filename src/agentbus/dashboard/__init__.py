"""The web dashboard: the team, its open questions, plans, traffic and dead letters, live.

Needs the ``dashboard`` extra (Starlette, uvicorn, sse-starlette) for the HTTP app; the
boards themselves run on any transport.
"""

from agentbus.dashboard._agents import AgentBoard
from agentbus.dashboard._changes import Changes
from agentbus.dashboard._dashboard import Dashboard
from agentbus.dashboard._dead_letters import DeadLetterBoard
from agentbus.dashboard._plans import PlanBoard
from agentbus.dashboard._questions import QuestionBoard
from agentbus.dashboard._settings import DashboardSettings
from agentbus.dashboard._traffic import TrafficBoard

__all__ = [
    "AgentBoard",
    "Changes",
    "Dashboard",
    "DashboardSettings",
    "DeadLetterBoard",
    "PlanBoard",
    "QuestionBoard",
    "TrafficBoard",
]
