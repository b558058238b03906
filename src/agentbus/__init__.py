"""agentbus: agents that work as a team over RabbitMQ.

Agents share one topic exchange and speak one versioned JSON envelope
(``agentbus.envelopes``); ``agentbus.bus`` carries it over RabbitMQ.
"""

import importlib
from typing import TYPE_CHECKING, Any

from agentbus._config import Settings
from agentbus._exceptions import (
    AccessRefused,
    AgentBusError,
    ArtifactCorrupt,
    ArtifactError,
    ArtifactExpired,
    ArtifactMissing,
    BrokerUnavailable,
    BusClosed,
    Cancelled,
    ConfigurationError,
    ConnectionLost,
    EnvelopeError,
    InputRequired,
    InvalidParameters,
    NoCapableAgent,
    NoInstance,
    PayloadTooLarge,
    PublishFailed,
    QuestionClosed,
    QuestionDeclined,
    QuotaExceeded,
    RemoteError,
    RequestTimeout,
    SiteUnreachable,
    TLSError,
    TransportError,
    UnknownAction,
    Unroutable,
    UnsupportedVersion,
    UsageError,
)
from agentbus._logging import configure_logging
from agentbus._metrics import Metrics
from agentbus.agents import (
    Agent,
    AgentCard,
    ask,
    current_request,
    remember,
    report_progress,
    report_usage,
    send_partial,
    skill,
)
from agentbus.bus import Artifact, Bus, Transport, connect, put_artifact
from agentbus.envelopes import (
    Envelope,
    ErrorCode,
    ErrorEnvelope,
    EventEnvelope,
    Question,
    RequestEnvelope,
    ResponseEnvelope,
    decode,
    encode,
)

if TYPE_CHECKING:
    from agentbus.leader import Aggregate, Leader, Plan, PlanClient
    from agentbus.sync import SyncBus, connect_sync

__version__ = "0.2.0"

# Imported on first use (PEP 562): an agent, a registry or a one-shot command that never
# names them does not load the leader's models (about a fifth of the package's import).
_LAZY = {
    "Aggregate": "agentbus.leader",
    "Leader": "agentbus.leader",
    "Plan": "agentbus.leader",
    "PlanClient": "agentbus.leader",
    "SyncBus": "agentbus.sync",
    "connect_sync": "agentbus.sync",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentbus' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "AccessRefused",
    "Agent",
    "AgentBusError",
    "AgentCard",
    "Aggregate",
    "Artifact",
    "ArtifactCorrupt",
    "ArtifactError",
    "ArtifactExpired",
    "ArtifactMissing",
    "BrokerUnavailable",
    "Bus",
    "BusClosed",
    "Cancelled",
    "ConfigurationError",
    "ConnectionLost",
    "Envelope",
    "EnvelopeError",
    "ErrorCode",
    "ErrorEnvelope",
    "EventEnvelope",
    "InputRequired",
    "InvalidParameters",
    "Leader",
    "Metrics",
    "NoCapableAgent",
    "NoInstance",
    "PayloadTooLarge",
    "Plan",
    "PlanClient",
    "PublishFailed",
    "Question",
    "QuestionClosed",
    "QuestionDeclined",
    "QuotaExceeded",
    "RemoteError",
    "RequestEnvelope",
    "RequestTimeout",
    "ResponseEnvelope",
    "Settings",
    "SiteUnreachable",
    "SyncBus",
    "TLSError",
    "Transport",
    "TransportError",
    "UnknownAction",
    "Unroutable",
    "UnsupportedVersion",
    "UsageError",
    "__version__",
    "ask",
    "configure_logging",
    "connect",
    "connect_sync",
    "current_request",
    "decode",
    "encode",
    "put_artifact",
    "remember",
    "report_progress",
    "report_usage",
    "send_partial",
    "skill",
]
