"""Encode envelopes to bytes and decode bytes to envelopes, on orjson."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final

import orjson
from pydantic import ValidationError

from agentbus._exception_base import EnvelopeError, PayloadTooLarge, UnsupportedVersion
from agentbus.envelopes._codes import PROTOCOL_MAJOR, PROTOCOL_VERSION, MessageType
from agentbus.envelopes._dump import unserializable, wire_dict
from agentbus.envelopes._fast import envelope_dict, validator_for
from agentbus.envelopes._models import (
    Envelope,
    ErrorEnvelope,
    EventEnvelope,
    RequestEnvelope,
    ResponseEnvelope,
    new_message_id,
    utcnow,
)

__all__ = ["DEFAULT_MAX_SIZE", "decode", "decode_full", "encode", "encode_full"]

DEFAULT_MAX_SIZE: Final = 1024 * 1024
"""The default size cap of an encoded envelope: 1 MiB."""

_MODELS: Final[dict[str, type[Envelope]]] = {
    "request": RequestEnvelope,
    "response": ResponseEnvelope,
    "event": EventEnvelope,
    "error": ErrorEnvelope,
}
_VERSION_RE: Final = re.compile(r"^([0-9]{1,9})\.([0-9]{1,9})$")
_DUMPS_OPTIONS: Final = orjson.OPT_UTC_Z
_MAX_REPORTED_ERRORS: Final = 5
_MAX_DEPTH: Final = 254  # orjson.dumps refuses deeper nesting ("Recursion limit reached")
_COUNT_CHUNK: Final = 8192  # bytes (or characters) of a body counted at a time
_MESSAGE_TYPES: Final = frozenset(MessageType)


def encode(envelope: Envelope, *, max_size: int | None = DEFAULT_MAX_SIZE) -> bytes:
    """Serialize an envelope to UTF-8 JSON bytes.

    Args:
        envelope: The envelope to write.
        max_size: The size cap in bytes; ``None`` for none.

    Raises:
        EnvelopeError: A value in the envelope is not JSON serializable.
        PayloadTooLarge: The encoded envelope is larger than ``max_size``.
    """
    # A plain envelope of the four kinds: its dict in one step (_fast); anything else: wire_dict.
    return _written(envelope_dict(envelope) or wire_dict(envelope), max_size)


def encode_full(envelope: Envelope, *, max_size: int | None = DEFAULT_MAX_SIZE) -> bytes:
    """``encode`` without its fast path: what the fast path is held to (tests, bench)."""
    return _written(wire_dict(envelope), max_size)


def _written(fields: dict[str, Any], max_size: int | None) -> bytes:
    try:
        data = orjson.dumps(fields, default=unserializable, option=_DUMPS_OPTIONS)
    except TypeError as exc:
        raise EnvelopeError(f"cannot encode envelope: {exc}") from exc
    if max_size is not None and len(data) > max_size:
        raise PayloadTooLarge(
            f"envelope is {len(data)} bytes, over the {max_size}-byte cap",
            details={"size": len(data), "max_size": max_size},
        )
    return data


def decode(
    data: bytes | bytearray | memoryview | str,
    *,
    max_size: int | None = DEFAULT_MAX_SIZE,
    message_id: str | None = None,
    received_at: datetime | None = None,
) -> Envelope:
    """Parse and validate one envelope.

    A foreign client may leave out ``message_id`` and ``timestamp``: ``message_id``
    (the AMQP property, say) or a fresh UUID, and ``received_at`` or now, stand in.
    Unknown fields are kept and survive a later ``encode``.

    Raises:
        PayloadTooLarge: ``data`` is longer than ``max_size``.
        UnsupportedVersion: ``protocol_version`` has a MAJOR other than 1.
        EnvelopeError: anything else that is not a valid envelope.
    """
    obj = _parsed(data, max_size)
    validator = validator_for(obj)
    if validator is None:  # not the common case: the full path's checks and stand-ins
        return _validated(obj, message_id, received_at)
    try:
        return validator.validate_python(obj)  # type: ignore[no-any-return]
    except ValidationError as exc:
        raise _invalid(exc, obj) from exc


def decode_full(
    data: bytes | bytearray | memoryview | str,
    *,
    max_size: int | None = DEFAULT_MAX_SIZE,
    message_id: str | None = None,
    received_at: datetime | None = None,
) -> Envelope:
    """``decode`` without its fast path: what the fast path is held to (tests, bench)."""
    return _validated(_parsed(data, max_size), message_id, received_at)


def _parsed(data: bytes | bytearray | memoryview | str, max_size: int | None) -> Any:
    if max_size is not None and len(data) > max_size:
        raise PayloadTooLarge(
            f"envelope is {len(data)} bytes, over the {max_size}-byte cap",
            details={"size": len(data), "max_size": max_size},
        )
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise EnvelopeError(f"not valid UTF-8 JSON: {exc}") from exc
    # A body off the wire, with too few brackets to be too deep: known without a call.
    # (One pass deleting the brackets costs half of two passes counting them.)
    if (
        isinstance(data, bytes)
        and len(data) <= _COUNT_CHUNK
        and len(data) - len(data.translate(None, b"[{")) <= _MAX_DEPTH
    ):
        return obj
    _check_writable(data, obj)
    return obj


def _validated(obj: Any, message_id: str | None, received_at: datetime | None) -> Envelope:
    if not isinstance(obj, dict):
        raise EnvelopeError(f"an envelope is a JSON object, not {_json_type(obj)}")
    _check_version(obj)
    message_type = obj.get("message_type")
    # An array or object here is unhashable: test the type before the set membership.
    if not isinstance(message_type, str) or message_type not in _MESSAGE_TYPES:
        raise EnvelopeError(
            f"message_type must be one of {', '.join(sorted(_MESSAGE_TYPES))}",
            details={"field": "message_type"},
            raw=obj,
        )
    if "message_id" not in obj:
        obj["message_id"] = message_id or new_message_id()
    if "timestamp" not in obj:
        obj["timestamp"] = received_at or utcnow()
    try:
        # message_type is checked above: validate with that kind's model, not the union.
        return _MODELS[message_type].__pydantic_validator__.validate_python(obj)  # type: ignore[no-any-return]
    except ValidationError as exc:
        raise _invalid(exc, obj) from exc


def _check_writable(data: bytes | bytearray | memoryview | str, obj: Any) -> None:
    # orjson reads JSON nested up to 1,024 levels but writes only up to 254: an envelope
    # read must be writable again (a reply, a stored copy, a forward). Only JSON with
    # that many brackets can be that deep; counting them costs little, writing it more.
    text = data.tobytes() if isinstance(data, memoryview) else data
    if not _more_brackets_than(_MAX_DEPTH, text):
        return
    try:
        orjson.dumps(obj)
    except orjson.JSONEncodeError as exc:
        raise EnvelopeError(
            f"JSON nested deeper than {_MAX_DEPTH} levels cannot be written back: {exc}",
            details={"max_depth": _MAX_DEPTH},
        ) from exc


def _more_brackets_than(limit: int, text: bytes | bytearray | str) -> bool:
    square, curly = ("[", "{") if isinstance(text, str) else (b"[", b"{")
    if len(text) <= _COUNT_CHUNK:
        return text.count(square) + text.count(curly) > limit  # type: ignore[arg-type]
    # A long body (many small records, say) is past the limit after its first chunks:
    # counting the rest would only delay the test that follows.
    seen = 0
    for start in range(0, len(text), _COUNT_CHUNK):
        end = start + _COUNT_CHUNK
        seen += text.count(square, start, end) + text.count(curly, start, end)  # type: ignore[arg-type]
        if seen > limit:
            return True
    return False


def _check_version(obj: dict[str, Any]) -> None:
    version = obj.get("protocol_version")
    if version == PROTOCOL_VERSION:  # the common case, without the regex
        return
    if not isinstance(version, str):
        raise EnvelopeError(
            "protocol_version is missing or not a string",
            details={"field": "protocol_version"},
            raw=obj,
        )
    match = _VERSION_RE.fullmatch(version)
    if match is None:
        raise EnvelopeError(
            f"protocol_version {_clip(version)} is not MAJOR.MINOR",
            details={"field": "protocol_version"},
            raw=obj,
        )
    if int(match.group(1)) != PROTOCOL_MAJOR:
        raise UnsupportedVersion(
            f"protocol_version {version} is not supported; this reader speaks {PROTOCOL_MAJOR}.x",
            details={"protocol_version": version, "supported": f"{PROTOCOL_MAJOR}.x"},
            raw=obj,
        )


def _invalid(exc: ValidationError, obj: dict[str, Any]) -> EnvelopeError:
    errors = [
        {"field": ".".join(str(part) for part in error["loc"]), "error": error["msg"]}
        for error in exc.errors(include_url=False, include_context=False, include_input=False)
    ]
    summary = "; ".join(
        f"{e['field'] or 'envelope'}: {e['error']}" for e in errors[:_MAX_REPORTED_ERRORS]
    )
    if len(errors) > _MAX_REPORTED_ERRORS:
        summary += f"; and {len(errors) - _MAX_REPORTED_ERRORS} more"
    return EnvelopeError(f"invalid envelope: {summary}", details={"errors": errors}, raw=obj)


def _clip(value: str, limit: int = 40) -> str:
    # Error messages quote input; a huge value must not make the error reply too large.
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(value)} characters)"


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"
