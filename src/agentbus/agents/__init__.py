"""The agent runtime: skills, agent cards, heartbeats and concurrency."""

from agentbus.agents._agent import Agent, current_request
from agentbus.agents._card import AgentCard, SkillCard
from agentbus.agents._heartbeat import (
    AGENT_OFFLINE,
    AGENT_ONLINE,
    ANNOUNCE,
    HEARTBEAT,
    AgentStatus,
    Heartbeat,
    OfflineNotice,
)
from agentbus.agents._reporting import (
    PROGRESS_STATES,
    report_progress,
    report_usage,
    send_partial,
)
from agentbus.agents._runner import run_until_signalled
from agentbus.agents._skills import SkillSpec, skill

__all__ = [
    "AGENT_OFFLINE",
    "AGENT_ONLINE",
    "ANNOUNCE",
    "HEARTBEAT",
    "PROGRESS_STATES",
    "Agent",
    "AgentCard",
    "AgentStatus",
    "Heartbeat",
    "OfflineNotice",
    "SkillCard",
    "SkillSpec",
    "current_request",
    "report_progress",
    "report_usage",
    "run_until_signalled",
    "send_partial",
    "skill",
]
