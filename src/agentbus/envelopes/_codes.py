"""Enumerations and constants of wire contract 1.3."""

from __future__ import annotations

import enum
import re
from typing import Final

__all__ = [
    "ARTIFACTS_SINCE",
    "BROADCAST",
    "ID_PATTERN",
    "PROTOCOL_MAJOR",
    "PROTOCOL_VERSION",
    "QUESTIONS_SINCE",
    "ErrorCode",
    "MessageType",
    "ResponseStatus",
    "is_valid_id",
]

PROTOCOL_MAJOR: Final = 1
PROTOCOL_VERSION: Final = "1.3"  # 1.1: rate_limited; 1.2: questions; 1.3: artifacts
QUESTIONS_SINCE: Final = (1, 2)
"""The first version whose readers take an ``input_required`` response (docs/wire.md)."""
ARTIFACTS_SINCE: Final = (1, 3)
"""The first version whose readers take a result sent by reference (docs/wire.md)."""
BROADCAST: Final = "broadcast"
ID_PATTERN: Final = r"^[A-Za-z0-9_-]{1,128}$"

_ID_RE: Final = re.compile(ID_PATTERN)


def is_valid_id(value: object) -> bool:
    """Tell whether ``value`` is a valid agent id, service name, action or event name."""
    return isinstance(value, str) and _ID_RE.fullmatch(value) is not None


class MessageType(enum.StrEnum):
    """The four kinds of envelope."""

    REQUEST = "request"
    RESPONSE = "response"
    EVENT = "event"
    ERROR = "error"


class ResponseStatus(enum.StrEnum):
    """The status of a response payload."""

    SUCCESS = "success"
    FAILURE = "failure"
    IN_PROGRESS = "in_progress"
    INPUT_REQUIRED = "input_required"
    """The skill asks its caller a question (``result``: the question); since 1.2."""


class ErrorCode(enum.StrEnum):
    """The stable, machine-readable error codes of the wire contract."""

    INVALID_ENVELOPE = "invalid_envelope"
    UNSUPPORTED_VERSION = "unsupported_version"
    UNKNOWN_ACTION = "unknown_action"
    INVALID_PARAMETERS = "invalid_parameters"
    NO_CAPABLE_AGENT = "no_capable_agent"
    AGENT_UNAVAILABLE = "agent_unavailable"
    TIMEOUT = "timeout"
    PROCESSING_FAILED = "processing_failed"
    CANCELLED = "cancelled"
    UNAUTHORIZED = "unauthorized"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    RATE_LIMITED = "rate_limited"
    """The sender (its broker user) is over its rate at this receiver (since 1.1)."""
    INPUT_REQUIRED = "input_required"
    """The skill asks a question a caller before 1.2 cannot take (``details.question``;
    since 1.2)."""
    QUESTION_CLOSED = "question_closed"
    """An answer to a question that is not open: unknown, expired or answered (since 1.2)."""
    ARTIFACT_MISSING = "artifact_missing"
    """An artifact named by a message cannot be found: never stored, deleted, or past its
    retention (``details.reason``: ``missing`` or ``expired``; since 1.3)."""
    ARTIFACT_CORRUPT = "artifact_corrupt"
    """An artifact's bytes do not match its size or SHA-256 digest (since 1.3)."""
    QUOTA_EXCEEDED = "quota_exceeded"
    """An artifact over its owner's quota or over the largest size allowed (since 1.3)."""
