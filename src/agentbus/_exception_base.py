"""The root of the exception tree and the errors of the wire format, beneath ``envelopes``.

``agentbus._exceptions`` draws the whole tree and is where the library takes it from;
these are defined here, a floor lower, because ``envelopes`` raises them while
``_exceptions`` names an envelope (``RemoteError.envelope``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["AgentBusError", "EnvelopeError", "PayloadTooLarge", "UnsupportedVersion"]


class AgentBusError(Exception):
    """Base class of every error agentbus raises."""

    code: str = "processing_failed"

    def __init__(
        self, message: str, *, details: dict[str, Any] | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details or {}
        if code is not None:
            self.code = code


class EnvelopeError(AgentBusError):
    """Bytes that do not decode to a valid envelope.

    ``raw`` holds the decoded JSON object when the bytes were JSON at all, so a
    receiver can still find a ``sender_id`` or ``message_id`` to answer to.
    """

    code: str = "invalid_envelope"

    def __init__(
        self,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        raw: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, details=details)
        self.raw = raw


class UnsupportedVersion(EnvelopeError):
    """An envelope of a protocol MAJOR version this reader does not speak."""

    code: str = "unsupported_version"


class PayloadTooLarge(EnvelopeError):
    """An envelope larger than the configured size cap."""

    code: str = "payload_too_large"
