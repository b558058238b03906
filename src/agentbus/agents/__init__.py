"""The agent runtime: skills, agent cards, heartbeats and concurrency."""

from agentbus.agents._agent import NOTIFY_START, Agent, current_request
from agentbus.agents._cancel import CancelCause, cancel_cause, send_cancel
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
from agentbus.agents._skills import SkillMark, SkillSpec, skill
from agentbus.agents._traffic import LATENCY_BUCKETS

__all__ = [
    "AGENT_OFFLINE",
    "AGENT_ONLINE",
    "ANNOUNCE",
    "HEARTBEAT",
    "LATENCY_BUCKETS",
    "NOTIFY_START",
    "PROGRESS_STATES",
    "Agent",
    "AgentCard",
    "AgentStatus",
    "CancelCause",
    "Heartbeat",
    "OfflineNotice",
    "SkillCard",
    "SkillMark",
    "SkillSpec",
    "cancel_cause",
    "current_request",
    "report_progress",
    "report_usage",
    "run_until_signalled",
    "send_cancel",
    "send_partial",
    "skill",
]
