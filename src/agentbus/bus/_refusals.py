"""Deliveries the bus will not run: undecodable, refused, over rate, poison, or turned away.

Each is counted, audited where an audit trail is kept, and answered with an error where
someone can be told; the step returns how the delivery is settled.
"""

from __future__ import annotations

import re
from typing import Any, Final

from agentbus._exceptions import EnvelopeError
from agentbus._logging import get_logger
from agentbus.bus._delivery import IncomingMessage, Settle
from agentbus.bus._poison import DeliveryLimit, Verdict, attempt_of
from agentbus.bus._replies import Replier
from agentbus.bus._stats import BusStats
from agentbus.envelopes import (
    Envelope,
    ErrorCode,
    ErrorEnvelope,
    ErrorPayload,
    Metadata,
    RequestEnvelope,
    ResponseEnvelope,
    is_valid_id,
)
from agentbus.security import AuditSink, Refusal, audit_record, envelope_fields, raw_fields

__all__ = ["AMQP_MESSAGE_ID", "Refusals"]

AMQP_MESSAGE_ID: Final = re.compile(r"^[\x21-\x7e]{1,255}$")
"""What an AMQP message id (or an envelope's, copied from it) may be."""

_NO_ANSWER_TYPES: Final = frozenset({"response", "error", "event"})
_log = get_logger("agentbus.bus")


class Refusals:
    """Says no to a delivery: counts it, audits it, answers it, and says how to settle it."""

    def __init__(
        self,
        *,
        agent_id: str,
        replier: Replier,
        stats: BusStats,
        audit: AuditSink | None,
        limit: DeliveryLimit | None,
    ) -> None:
        self._agent_id = agent_id
        self._replier = replier
        self._stats = stats
        self._audit = audit
        self._limit = limit

    async def undecodable(self, message: IncomingMessage, exc: EnvelopeError) -> Settle:
        """Dead-letter a delivery that is not a valid envelope; answer it where one can."""
        self._stats.consumed_by[("invalid", exc.code)] += 1
        raw = exc.raw or {}
        self._record(message.user_id, exc.code, raw_fields(raw, message.message_id))
        _log.warning(
            "undecodable message dead-lettered",
            error=exc.message,
            code=exc.code,
            routing_key=message.routing_key,
            amqp_message_id=message.message_id,
        )
        requester = raw.get("sender_id")
        requester = requester if is_valid_id(requester) else None
        if _answerable(raw.get("message_type", message.type)) and (message.reply_to or requester):
            correlation = raw.get("message_id", message.message_id)
            valid = isinstance(correlation, str) and AMQP_MESSAGE_ID.match(correlation)
            error = ErrorEnvelope(
                sender_id=self._agent_id,
                receiver_id=requester or "anonymous",
                payload=ErrorPayload(code=exc.code, message=exc.message, details=exc.details),
                metadata=Metadata(correlation_id=correlation if valid else None),
            )
            await self._replier.refuse(error, message.reply_to)
        return Settle.DEAD_LETTER

    async def refused(
        self, message: IncomingMessage, envelope: Envelope, reason: Refusal
    ) -> Settle:
        """Dead-letter a delivery admission refuses; tell a request why where that is safe."""
        # No handler runs. A request is told why: at its reply_to, or at its sender's
        # reply key unless the sender's identity is what is in doubt.
        self._stats.refused += 1
        self._stats.refused_by[reason] += 1
        self._record(message.user_id, reason.value, envelope_fields(envelope))
        self._stats.consumed_by[(envelope.message_type, "refused")] += 1
        _log.warning(
            "delivery refused",
            reason=reason.value,
            routing_key=message.routing_key,
            sender_id=envelope.sender_id,
            receiver_id=envelope.receiver_id,
            user_id=message.user_id,
        )
        if isinstance(envelope, RequestEnvelope) and (message.reply_to or not reason.is_identity):
            error = envelope.error(
                ErrorCode.UNAUTHORIZED,
                f"refused: {reason.explanation}",
                sender_id=self._agent_id,
                details={"reason": reason.value},
            )
            await self._replier.refuse(error, message.reply_to)
        return Settle.DEAD_LETTER

    async def over_rate(
        self, message: IncomingMessage, request: RequestEnvelope, wait: float
    ) -> Settle:
        """Answer ``rate_limited`` with when to retry; the request is not run nor remembered."""
        # Not remembered: the same request sent again later is served.
        self._stats.rate_limited += 1
        self._stats.consumed_by[("request", "rate_limited")] += 1
        self._record(message.user_id, ErrorCode.RATE_LIMITED.value, envelope_fields(request))
        error = request.error(
            ErrorCode.RATE_LIMITED,
            "the sender is over its rate: retry later",
            sender_id=self._agent_id,
            details={"retry_after": round(wait, 3)},
        )
        await self._replier.refuse(error, message.reply_to)
        return Settle.ACK

    async def turned_away(
        self, message: IncomingMessage, request: RequestEnvelope, *, shared: bool
    ) -> Settle:
        """Hand back a request that came while the bus drains."""
        self._stats.consumed_by[("request", "turned_away")] += 1
        # Work from a shared queue goes back for another instance; work sent to this
        # instance alone is refused, since requeueing would bring it back here.
        if shared:
            return Settle.REQUEUE
        error = request.error(
            ErrorCode.AGENT_UNAVAILABLE,
            f"{self._agent_id} is shutting down",
            sender_id=self._agent_id,
        )
        await self._replier.try_send(error, message.reply_to)
        return Settle.ACK

    async def counted_return(self, message: IncomingMessage, envelope: Envelope) -> Settle | None:
        """Settle a redelivery from a classic service queue by its count, or None to serve it."""
        # A copy cannot carry another user's user_id (the broker refuses the publish).
        limit = self._limit
        if limit is None or message.user_id is not None:
            return None
        if isinstance(envelope, ResponseEnvelope | ErrorEnvelope):
            return None
        verdict = await limit.judge(message)
        if verdict is Verdict.REPUBLISHED:
            self._stats.consumed_by[(envelope.message_type, "republished")] += 1
            return Settle.ACK
        if verdict is Verdict.NOT_COUNTED:
            return Settle.REQUEUE
        failed = attempt_of(message)
        self._stats.poison_dead_lettered += 1
        self._stats.consumed_by[(envelope.message_type, "poison")] += 1
        if isinstance(envelope, RequestEnvelope):
            error = envelope.error(
                ErrorCode.PROCESSING_FAILED,
                f"gave up after {failed} deliveries: the request kept failing its consumer",
                sender_id=self._agent_id,
                details={"attempts": failed, "limit": limit.limit},
            )
            await self._replier.refuse(error, message.reply_to)
        return Settle.DEAD_LETTER

    def _record(self, user_id: str | None, outcome: str, fields: dict[str, Any]) -> None:
        if self._audit is not None:
            self._audit.append(
                audit_record(
                    kind="refusal",
                    recorder=self._agent_id,
                    user_id=user_id,
                    outcome=outcome,
                    **fields,
                )
            )


def _answerable(message_type: object) -> bool:
    # message_type may be any JSON value here (an object, an array): compare, not hash.
    return not (isinstance(message_type, str) and message_type in _NO_ANSWER_TYPES)
