"""AMQP properties for the publish seam (``_amqp.py``): built as aio-pika would, marshalled
without pamqp's generic walk.

``tests/unit/test_amqp_seam.py`` holds the bytes to ``aio_pika.Message``'s and to pamqp's
own for any values, and checks pamqp and aiormq take these properties for theirs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pamqp import encode
from pamqp.commands import Basic
from pamqp.common import FieldTable

__all__ = ["Properties", "message_properties"]


class Properties(Basic.Properties):
    """``Basic.Properties`` that marshal to pamqp's bytes without pamqp's generic walk.

    pamqp looks up each property's type by name and dispatches its encoder: about 20 µs
    for a message's dozen properties, on every publish. Here each type has its encoder at
    hand (``_ENCODERS``, built from pamqp's own order and flags); a type it does not know
    goes to pamqp's encoder. No ``__slots__`` of its own: pamqp reads ``__slots__`` as the
    list of properties (their number is its truth value: aiormq replaces a falsy one).
    """

    def marshal(self) -> bytes:
        """Return the properties as a content header carries them (pamqp's bytes)."""
        flags = 0
        parts = []
        for name, flag, encoder in _ENCODERS:
            value = getattr(self, name)
            if value is not None and value != "":
                flags |= flag
                parts.append(encoder(value))
        if flags > 0xFFFF:  # pamqp's continuation: no property of 0-9-1 sets one
            return super().marshal()
        return _FLAGS(flags) + b"".join(parts)


_FLAGS = struct.Struct(">H").pack
_LENGTH = struct.Struct(">B").pack
_SECONDS = struct.Struct(">Q").pack
_EMPTY_TABLE = b"\x00\x00\x00\x00"


def _short_string(value: str) -> bytes:
    data = value.encode()
    if len(data) > 255:
        return encode.short_string(value)  # pamqp's error
    return _LENGTH(len(data)) + data


def _octet(value: int) -> bytes:
    if isinstance(value, int) and 0 <= value <= 255:
        return _LENGTH(value)
    return encode.octet(value)  # pamqp's error


def _timestamp(value: datetime) -> bytes:
    if isinstance(value, datetime) and value.utcoffset() is not None:
        return _SECONDS(int(value.timestamp()))
    return encode.timestamp(value)  # naive (taken as UTC) or a struct_time


def _table(value: FieldTable) -> bytes:
    return _EMPTY_TABLE if not value else encode.field_table(value)


def _encoder(kind: str) -> Callable[[Any], bytes]:
    fast: dict[str, Callable[[Any], bytes]] = {
        "shortstr": _short_string,
        "octet": _octet,
        "timestamp": _timestamp,
        "table": _table,
    }
    return fast.get(kind) or (lambda value: encode.by_type(value, kind))


_ENCODERS = tuple(
    (name, Basic.Properties.flags[name], _encoder(Basic.Properties.amqp_type(name)))
    for name in Basic.Properties.__slots__
)


def message_properties(
    *,
    app_id: str,
    message_id: str,
    message_type: str,
    timestamp: datetime,
    correlation_id: str | None,
    reply_to: str | None,
    persistent: bool,
    ttl: float | None,
    user_id: str | None,
    headers: FieldTable | None = None,
) -> Basic.Properties:
    """Build the AMQP properties ``aio_pika.Message`` would carry for these values."""
    return Properties(
        app_id=app_id,
        content_type="application/json",
        correlation_id=correlation_id,
        delivery_mode=2 if persistent else 1,
        expiration=None if ttl is None else str(int(max(ttl, 0.001) * 1000)),
        headers=dict(headers) if headers else {},
        message_id=message_id,
        message_type=message_type,
        priority=0,
        reply_to=reply_to,
        timestamp=timestamp,
        user_id=user_id,
    )
