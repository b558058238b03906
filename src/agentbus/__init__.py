"""agentbus: agents that work as a team over RabbitMQ.

Agents share one topic exchange and speak one versioned JSON envelope
(``agentbus.envelopes``); ``agentbus.bus`` carries it over RabbitMQ.
"""

from agentbus._config import Settings
from agentbus._exceptions import (
    AccessRefused,
    AgentBusError,
    BrokerUnavailable,
    BusClosed,
    Cancelled,
    ConfigurationError,
    ConnectionLost,
    EnvelopeError,
    InvalidParameters,
    NoCapableAgent,
    NoInstance,
    PayloadTooLarge,
    PublishFailed,
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
    current_request,
    report_progress,
    report_usage,
    send_partial,
    skill,
)
from agentbus.bus import Bus, Transport, connect
from agentbus.envelopes import (
    Envelope,
    ErrorCode,
    ErrorEnvelope,
    EventEnvelope,
    RequestEnvelope,
    ResponseEnvelope,
    decode,
    encode,
)
from agentbus.leader import Aggregate, Leader, Plan, PlanClient

__version__ = "0.2.0"

__all__ = [
    "AccessRefused",
    "Agent",
    "AgentBusError",
    "AgentCard",
    "Aggregate",
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
    "InvalidParameters",
    "Leader",
    "Metrics",
    "NoCapableAgent",
    "NoInstance",
    "PayloadTooLarge",
    "Plan",
    "PlanClient",
    "PublishFailed",
    "RemoteError",
    "RequestEnvelope",
    "RequestTimeout",
    "ResponseEnvelope",
    "Settings",
    "SiteUnreachable",
    "TLSError",
    "Transport",
    "TransportError",
    "UnknownAction",
    "Unroutable",
    "UnsupportedVersion",
    "UsageError",
    "__version__",
    "configure_logging",
    "connect",
    "current_request",
    "decode",
    "encode",
    "report_progress",
    "report_usage",
    "send_partial",
    "skill",
]
