"""The agent runtime: skills, agent cards, heartbeats, questions and concurrency."""

from agentbus.agents._agent import NOTIFY_START, Agent, current_request
from agentbus.agents._asking import QUESTION_ANSWERED, QUESTION_ASKED, answer_parameters
from agentbus.agents._cancel import CancelCause, cancel_cause, send_cancel
from agentbus.agents._card import AgentCard, SkillCard
from agentbus.agents._conversation import Deferred, ask, remember
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
    "QUESTION_ANSWERED",
    "QUESTION_ASKED",
    "Agent",
    "AgentCard",
    "AgentStatus",
    "CancelCause",
    "Deferred",
    "Heartbeat",
    "OfflineNotice",
    "SkillCard",
    "SkillMark",
    "SkillSpec",
    "answer_parameters",
    "ask",
    "cancel_cause",
    "current_request",
    "remember",
    "report_progress",
    "report_usage",
    "run_until_signalled",
    "send_cancel",
    "send_partial",
    "skill",
]
