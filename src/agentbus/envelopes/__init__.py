"""The wire format: envelope models, the orjson codec, error codes and JSON Schema."""

from agentbus._exception_base import EnvelopeError, PayloadTooLarge, UnsupportedVersion
from agentbus.envelopes._codec import DEFAULT_MAX_SIZE, decode, encode
from agentbus.envelopes._codes import (
    BROADCAST,
    ID_PATTERN,
    PROTOCOL_VERSION,
    ErrorCode,
    MessageType,
    ResponseStatus,
    is_valid_id,
)
from agentbus.envelopes._models import (
    AgentId,
    Envelope,
    ErrorEnvelope,
    ErrorPayload,
    EventEnvelope,
    EventPayload,
    MessageId,
    Metadata,
    RequestEnvelope,
    RequestPayload,
    ResponseEnvelope,
    ResponsePayload,
    new_message_id,
    utcnow,
)
from agentbus.envelopes._schema import envelope_schema

__all__ = [
    "BROADCAST",
    "DEFAULT_MAX_SIZE",
    "ID_PATTERN",
    "PROTOCOL_VERSION",
    "AgentId",
    "Envelope",
    "EnvelopeError",
    "ErrorCode",
    "ErrorEnvelope",
    "ErrorPayload",
    "EventEnvelope",
    "EventPayload",
    "MessageId",
    "MessageType",
    "Metadata",
    "PayloadTooLarge",
    "RequestEnvelope",
    "RequestPayload",
    "ResponseEnvelope",
    "ResponsePayload",
    "ResponseStatus",
    "UnsupportedVersion",
    "decode",
    "encode",
    "envelope_schema",
    "is_valid_id",
    "new_message_id",
    "utcnow",
]
