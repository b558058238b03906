"""The audit trail's records: what is kept of each request and refusal, and where it is.

A record says who (``sender_id``, the AMQP ``user_id``), what (``action``, ``receiver``),
how it ended (``outcome``: ``success``, an error code, ``duplicate``, or the refusal's
reason) and when and how long, with the request's ``message_id`` (its replies'
correlation id) and its ``plan_id``; never its parameters or result.

The stream's messages are JSON arrays of records, each published with the recorder's
AMQP ``user_id`` when senders are verified, so a reader knows which broker user wrote
it. A record's position is its message's stream offset and its index in that message:
a reader that keeps the last position it read reads on from the next record, missing
and repeating nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

import orjson

from agentbus.envelopes import Envelope, RequestEnvelope

__all__ = [
    "AUDIT_FORMAT",
    "AuditEntry",
    "AuditPosition",
    "StreamOffset",
    "audit_entries",
    "audit_record",
    "envelope_fields",
    "raw_fields",
]

AUDIT_FORMAT: Final = 1
"""The version of the record format (``v`` in each record)."""

_MAX_FIELD: Final = 255  # an undecodable message's fields are recorded only if short text

StreamOffset = Literal["first", "last", "next"] | int | datetime
"""Where to start: the oldest record kept, the last chunk, new ones only, an offset, a time."""


AuditPosition = tuple[int, int]
"""Where a record is: its message's stream offset, and its index in that message."""


def audit_record(
    *,
    kind: str,
    recorder: str,
    user_id: str | None,
    outcome: str,
    seconds: float | None = None,
    sender_id: str | None = None,
    message_type: str | None = None,
    action: str | None = None,
    receiver: str | None = None,
    message_id: str | None = None,
    plan_id: str | None = None,
) -> dict[str, Any]:
    """Build one audit record (``kind``: ``request`` or ``refusal``)."""
    return {
        "v": AUDIT_FORMAT,
        "at": datetime.now(UTC).isoformat(),
        "kind": kind,
        "recorder": recorder,
        "sender_id": sender_id,
        "user_id": user_id,
        "message_type": message_type,
        "action": action,
        "receiver": receiver,
        "outcome": outcome,
        "duration_ms": None if seconds is None else round(seconds * 1000, 3),
        "message_id": message_id,
        "plan_id": plan_id,
    }


def envelope_fields(envelope: Envelope) -> dict[str, Any]:
    """The fields of a record that a decoded envelope gives (never its parameters)."""
    extra: Mapping[str, Any] = envelope.metadata.model_extra or {}
    plan_id = extra.get("plan_id")
    return {
        "sender_id": envelope.sender_id,
        "message_type": envelope.message_type,
        "action": envelope.payload.action if isinstance(envelope, RequestEnvelope) else None,
        "receiver": envelope.receiver_id,
        "message_id": envelope.message_id,
        "plan_id": plan_id if isinstance(plan_id, str) else None,
    }


def raw_fields(raw: Mapping[str, Any], amqp_message_id: str | None) -> dict[str, Any]:
    """The fields of a record that an undecodable message's JSON gives, where they are ids."""

    def text(value: object) -> str | None:
        return value if isinstance(value, str) and len(value) <= _MAX_FIELD else None

    return {
        "sender_id": text(raw.get("sender_id")),
        "message_type": text(raw.get("message_type")),
        "receiver": text(raw.get("receiver_id")),
        "message_id": text(raw.get("message_id")) or amqp_message_id,
    }


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One record of the audit stream, where it is, and the broker user that wrote it."""

    offset: int
    index: int
    record: dict[str, Any]
    written_by: str | None

    @property
    def position(self) -> AuditPosition:
        """Where this record is: pass it as ``after`` to read on from the next one."""
        return (self.offset, self.index)


def audit_entries(
    body: bytes, offset: int, written_by: str | None, *, after: AuditPosition | None
) -> list[AuditEntry]:
    """Return the records of the stream message ``body`` that come after ``after``.

    Args:
        body: The message's body: a JSON array of records.
        offset: The message's stream offset.
        written_by: The message's AMQP ``user_id``: the broker user that wrote it.
        after: A position read already (None: none was).
    """
    records = orjson.loads(body)
    return [
        AuditEntry(offset, index, record, written_by)
        for index, record in enumerate(records if isinstance(records, list) else [])
        if after is None or (offset, index) > after
    ]
