"""The agentbus exception tree.

Every error agentbus raises is an ``AgentBusError``; raise one with ``code=`` from a
skill to answer with that wire error code. Errors that correspond to a
wire error code carry it in ``code``, so an agent can answer with an error
envelope and a caller can act on the code it received::

    AgentBusError
    ├── ConfigurationError            bad settings or arguments
    ├── UsageError                    an object used out of its lifecycle (a runner run twice)
    ├── EnvelopeError                 invalid_envelope: bytes that are not a valid envelope
    │   ├── UnsupportedVersion        unsupported_version: another protocol MAJOR
    │   └── PayloadTooLarge           payload_too_large: over the size cap
    ├── TransportError                the broker or the connection to it failed
    │   ├── BrokerUnavailable         cannot connect (names the URL, without password)
    │   │   └── TLSError                  the TLS handshake failed: which certificate, or no TLS
    │   ├── ConnectionLost            the connection dropped during an operation
    │   ├── PublishFailed             the broker refused (nacked) a publish
    │   ├── AccessRefused             unauthorized: the broker's permissions refused it
    │   ├── QueueInUse                another consumer has the queue to itself (a lock held)
    │   └── BusClosed                 the bus is closed or closing
    ├── Unroutable                    agent_unavailable: nobody is bound to the receiver
    │   ├── NoInstance                the receiver's queue is there, with no instance on it
    │   └── SiteUnreachable           only a peer site could serve it, and its link is down
    ├── NoCapableAgent                no_capable_agent: no live agent offers the skill
    ├── UnknownAction                 unknown_action: the agent has no such skill
    ├── InvalidParameters             invalid_parameters: parameters do not fit the skill
    ├── Cancelled                     cancelled: a cancel request stopped the work
    │   └── QuestionDeclined          the caller declined to answer a skill's question
    ├── RequestTimeout                timeout: no answer within the request's time
    ├── InputRequired                 input_required: the work asks the caller a question
    ├── QuestionClosed                question_closed: an answer to a question not open
    ├── ArtifactError                 an artifact cannot be stored or read as it should
    │   ├── ArtifactMissing           artifact_missing: never stored, deleted, or gone
    │   │   └── ArtifactExpired           past its retention
    │   ├── ArtifactCorrupt           artifact_corrupt: bytes that fail the size or digest
    │   └── QuotaExceeded             quota_exceeded: over the owner's quota or size cap
    └── RemoteError                   the other side answered with an error envelope

The codes are the wire error codes of ``agentbus.envelopes.ErrorCode``. The root of the
tree and the envelope errors live a floor lower, in ``agentbus._exception_base``:
``envelopes`` raises those, and ``RemoteError`` here names an ``ErrorEnvelope``, so one
module holding both would make a circle with ``envelopes``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbus._exception_base import (
    AgentBusError,
    EnvelopeError,
    PayloadTooLarge,
    UnsupportedVersion,
)

if TYPE_CHECKING:
    from agentbus.envelopes import ErrorEnvelope, Question, ResponseEnvelope

__all__ = [
    "AccessRefused",
    "AgentBusError",
    "ArtifactCorrupt",
    "ArtifactError",
    "ArtifactExpired",
    "ArtifactMissing",
    "BrokerUnavailable",
    "BusClosed",
    "Cancelled",
    "ConfigurationError",
    "ConnectionLost",
    "EnvelopeError",
    "InputRequired",
    "InvalidParameters",
    "NoCapableAgent",
    "NoInstance",
    "PayloadTooLarge",
    "PublishFailed",
    "QuestionClosed",
    "QuestionDeclined",
    "QueueInUse",
    "QuotaExceeded",
    "RemoteError",
    "RequestTimeout",
    "SiteUnreachable",
    "TLSError",
    "TransportError",
    "UnknownAction",
    "Unroutable",
    "UnsupportedVersion",
    "UsageError",
]


class ConfigurationError(AgentBusError):
    """Settings or arguments that cannot work."""


class UsageError(AgentBusError):
    """An object used against its lifecycle: a one-shot plan runner run a second time."""


class TransportError(AgentBusError):
    """The broker, or the connection to it, failed."""

    code: str = "agent_unavailable"


class BrokerUnavailable(TransportError):
    """The broker cannot be reached."""


class TLSError(BrokerUnavailable):
    """The TLS handshake with the broker failed: its certificate is not trusted, ours was
    refused or missing, or a plain ``amqp://`` connection met a TLS-only port."""


class ConnectionLost(TransportError):
    """The connection dropped while an operation was under way."""


class PublishFailed(TransportError):
    """The broker did not accept a publish (negative confirm)."""


class AccessRefused(TransportError):
    """The broker refused an operation for this user: a forbidden routing key, say (403)."""

    code: str = "unauthorized"


class QueueInUse(TransportError):
    """A queue asked for alone (an exclusive consumer) is taken by another consumer, or one
    has it alone: the lock it stands for is held elsewhere."""


class BusClosed(TransportError):
    """The bus is closed, or closing, and takes no more work."""


class Unroutable(AgentBusError):
    """No queue is bound for the receiver: nobody serves it."""

    code: str = "agent_unavailable"


class NoInstance(Unroutable):
    """The receiver's queue is there, but no instance consumes it: none is running."""


class SiteUnreachable(Unroutable):
    """Nothing here serves the receiver, and the peer sites that might are not heard from:
    the link to them is down (docs/sites.md). ``details["sites"]`` names them."""


class NoCapableAgent(AgentBusError):
    """No live agent offers the skill (or no registry is there to say)."""

    code: str = "no_capable_agent"


class UnknownAction(AgentBusError):
    """The receiver has no skill or built-in action of that name."""

    code: str = "unknown_action"


class InvalidParameters(AgentBusError):
    """A request's parameters do not validate against the skill's signature."""

    code: str = "invalid_parameters"


class Cancelled(AgentBusError):
    """The work was stopped by a ``cancel`` request."""

    code: str = "cancelled"


class QuestionDeclined(Cancelled):
    """The caller declined to answer the question a skill asked (``ask`` raises it)."""


class InputRequired(AgentBusError):
    """The work asks its caller a question, and waits for the answer (``question``).

    Answer it with ``bus.answer(question, ...)``, from this process or another one,
    until ``question.expires_at``; ``envelope`` is the response (or, from an older
    agent, the error) that asked.
    """

    code: str = "input_required"

    def __init__(self, question: Question, envelope: ResponseEnvelope | ErrorEnvelope) -> None:
        super().__init__(
            f"input required: {question.text}",
            details={"question": question.model_dump(mode="json")},
        )
        self.question = question
        self.envelope = envelope


class QuestionClosed(AgentBusError):
    """An answer to a question that is not open: unknown, expired or answered already
    (``details["reason"]``)."""

    code: str = "question_closed"


class RequestTimeout(AgentBusError):
    """No answer arrived within the request's timeout."""

    code: str = "timeout"


class ArtifactError(AgentBusError):
    """An artifact could not be stored or read as it should (the subclasses say why)."""

    code: str = "processing_failed"


class ArtifactMissing(ArtifactError):
    """The artifact is not where its reference says: never stored, deleted, its stream
    gone, or nothing came for it in time (``details["reason"]``)."""

    code: str = "artifact_missing"


class ArtifactExpired(ArtifactMissing):
    """The artifact is past its retention: the store no longer has (all of) it."""


class ArtifactCorrupt(ArtifactError):
    """The artifact's bytes do not match its reference's size or SHA-256 digest: none of
    them is to be trusted (a streaming reader gets this instead of its last chunk)."""

    code: str = "artifact_corrupt"


class QuotaExceeded(ArtifactError):
    """Storing the artifact would take its owner over its quota, or it is over the largest
    size allowed (``details["limit"]``: ``quota`` or ``max_size``)."""

    code: str = "quota_exceeded"


class RemoteError(AgentBusError):
    """The receiver answered a request with an error envelope."""

    def __init__(self, envelope: ErrorEnvelope) -> None:
        payload = envelope.payload
        super().__init__(f"{payload.code}: {payload.message}", details=payload.details)
        self.message = payload.message
        self.code = payload.code
        self.envelope = envelope
