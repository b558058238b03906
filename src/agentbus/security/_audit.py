"""The audit trail's records as a reader sees them: where each is, and who wrote it.

The stream's messages are JSON arrays of records; a record's position is its message's
stream offset and its index in that message, so a reader that keeps the last position
it read reads on from the next record, missing and repeating nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson

__all__ = ["AuditEntry", "AuditPosition", "StreamOffset", "audit_entries"]

StreamOffset = Literal["first", "last", "next"] | int | datetime
"""Where to start: the oldest record kept, the last chunk, new ones only, an offset, a time."""


AuditPosition = tuple[int, int]
"""Where a record is: its message's stream offset, and its index in that message."""


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
