"""agentbus: agents that work as a team over RabbitMQ.

Agents share one topic exchange and speak one versioned JSON envelope
(``agentbus.envelopes``); ``agentbus.bus`` carries it over RabbitMQ.
"""

from agentbus._config import Settings
from agentbus._exceptions import (
    AgentBusError,
    BrokerUnavailable,
    BusClosed,
    ConfigurationError,
    ConnectionLost,
    EnvelopeError,
    PayloadTooLarge,
    PublishFailed,
    RemoteError,
    RequestTimeout,
    TransportError,
    Unroutable,
    UnsupportedVersion,
)
from agentbus.bus import Bus, connect
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
    "AgentBusError",
    "BrokerUnavailable",
    "Bus",
    "BusClosed",
    "ConfigurationError",
    "ConnectionLost",
    "Envelope",
    "EnvelopeError",
    "ErrorCode",
    "ErrorEnvelope",
    "EventEnvelope",
    "PayloadTooLarge",
    "PublishFailed",
    "RemoteError",
    "RequestEnvelope",
    "RequestTimeout",
    "ResponseEnvelope",
    "Settings",
    "TransportError",
    "Unroutable",
    "UnsupportedVersion",
    "__version__",
    "connect",
    "decode",
    "encode",
]
