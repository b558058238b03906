"""The codec's fast path: a common envelope read and written with the least work around it.

What was measured decided its shape (CPU instructions per call of a 338-byte request, callgrind,
CPython 3.11, pydantic-core 2.x; ``bench/envelope_paths.py --alternatives`` at commit 239f431
times the same ways). The model's validator checks and builds the envelope's three models in
36k; checking the fields by hand (regexes, ``datetime.fromisoformat``) and building the same
instances (``__new__`` and their four slots) takes 61k at best, and ``model_construct`` 21k for
the payload alone. pydantic-core is the cheap way to make a model here: a hand-built path would
be the slow one. A core schema without the UTC after-validator saves 2k. ``validate_json`` on
the bytes would save ``orjson.loads`` (12k), but it reads what orjson refuses (``NaN``,
``1e400``), keeps the integers orjson reads as floats, and no cheap look at the bytes rules
those out. So the models' own validator stays the one that makes envelopes, and the fast path is
what is around it:

- decode: an envelope of the current contract with everything there (a known protocol
  version, a known ``message_type``, ``message_id`` and ``timestamp`` present) goes
  straight to its kind's validator; anything else takes the full path in ``_codec``
  (its checks, its stand-ins, its error messages). The common case passes every check
  of the full path, so the validator sees the very same input and says the same. What
  is left to save around the validator is little: 1% of a decode.
- encode: an envelope of exactly one of the four classes, with exactly its metadata and
  payload classes, is turned into the dict of ``model_dump`` in one step; any other
  (a subclass, a payload of another type) goes through ``_dump.wire_dict``: 30% fewer
  instructions for an encode.

``tests/unit/test_envelope_fast_path.py`` holds both paths to one another on the fuzz
corpus and on hypothesis-made valid and near-valid envelopes: the same envelope (types,
unknown fields and fields set included) and the same bytes, or the same refusal.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic_core import SchemaValidator

from agentbus.envelopes._codes import PROTOCOL_VERSION
from agentbus.envelopes._models import (
    ErrorEnvelope,
    ErrorPayload,
    EventEnvelope,
    EventPayload,
    Metadata,
    RequestEnvelope,
    RequestPayload,
    ResponseEnvelope,
    ResponsePayload,
    _WireModel,
)

__all__ = ["COMMON_VERSIONS", "envelope_dict", "validator_for"]

COMMON_VERSIONS: Final = frozenset({"1.0", "1.1", "1.2", PROTOCOL_VERSION})
"""The versions the fast path takes; another ``1.x`` is read by the full path."""

_VALIDATORS: Final[dict[str, SchemaValidator]] = {
    "request": RequestEnvelope.__pydantic_validator__,  # type: ignore[dict-item]
    "response": ResponseEnvelope.__pydantic_validator__,  # type: ignore[dict-item]
    "event": EventEnvelope.__pydantic_validator__,  # type: ignore[dict-item]
    "error": ErrorEnvelope.__pydantic_validator__,  # type: ignore[dict-item]
}
_PAYLOADS: Final[dict[type[_WireModel], type[_WireModel]]] = {
    RequestEnvelope: RequestPayload,
    ResponseEnvelope: ResponsePayload,
    EventEnvelope: EventPayload,
    ErrorEnvelope: ErrorPayload,
}


def validator_for(obj: object) -> SchemaValidator | None:
    """The validator of ``obj``'s kind when ``obj`` is a common envelope; else ``None``.

    Common: a JSON object whose ``protocol_version`` is one of ``COMMON_VERSIONS``, whose
    ``message_type`` is one of the four, and which has ``message_id`` and ``timestamp``
    (so decode has nothing to refuse before validation, and nothing to stand in).
    """
    if type(obj) is not dict:
        return None
    version = obj.get("protocol_version")
    kind = obj.get("message_type")
    # Strings first: a list or an object there is unhashable.
    if type(version) is not str or type(kind) is not str or version not in COMMON_VERSIONS:
        return None
    if "message_id" not in obj or "timestamp" not in obj:
        return None
    return _VALIDATORS.get(kind)


def envelope_dict(envelope: _WireModel) -> dict[str, Any] | None:
    """What ``_dump.wire_dict`` gives for ``envelope``, when it is a plain envelope; else ``None``.

    Plain: one of the four envelope classes exactly, holding a ``Metadata`` and its own
    payload class exactly. Their only excluded values are metadata's ``None`` fields
    (``exclude_if=_is_none``) and their only nested models are metadata and payload
    (``tests/unit/test_envelope_fast_path.py`` pins both).
    """
    payload_class = _PAYLOADS.get(type(envelope))
    if payload_class is None:
        return None
    fields = envelope.__dict__.copy()
    metadata = fields["metadata"]
    payload = fields["payload"]
    if type(metadata) is not Metadata or type(payload) is not payload_class:
        return None
    written = {}
    for name, value in metadata.__dict__.items():  # a loop: a comprehension is a call
        if value is not None:
            written[name] = value
    if metadata.__pydantic_extra__:
        written.update(metadata.__pydantic_extra__)
    fields["metadata"] = written
    # orjson only reads what it is given: the payload's own __dict__ can go in as it is.
    extra = payload.__pydantic_extra__
    fields["payload"] = payload.__dict__ | extra if extra else payload.__dict__
    if envelope.__pydantic_extra__:
        fields.update(envelope.__pydantic_extra__)
    return fields
