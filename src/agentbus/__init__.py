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
    PayloadTooLarge,
    PublishFailed,
    RemoteError,
    RequestTimeout,
    TransportError,
    UnknownAction,
    Unroutable,
    UnsupportedVersion,
)
from agentbus.agents import Agent, AgentCard, current_request, skill
from agentbus.agents.leader import Aggregate, Leader, Plan, PlanClient
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

__version__ = "0.1.0"

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
    "PayloadTooLarge",
    "Plan",
    "PlanClient",
    "PublishFailed",
    "RemoteError",
    "RequestEnvelope",
    "RequestTimeout",
    "ResponseEnvelope",
    "Settings",
    "Transport",
    "TransportError",
    "UnknownAction",
    "Unroutable",
    "UnsupportedVersion",
    "__version__",
    "connect",
    "current_request",
    "decode",
    "encode",
    "skill",
]
