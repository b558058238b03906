"""Property tests of the envelope codec: decode refuses only with EnvelopeError; round trips."""

from __future__ import annotations

import string
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentbus.envelopes import (
    Envelope,
    EnvelopeError,
    ErrorEnvelope,
    ErrorPayload,
    EventEnvelope,
    EventPayload,
    Metadata,
    RequestEnvelope,
    RequestPayload,
    ResponseEnvelope,
    ResponsePayload,
    ResponseStatus,
    decode,
    encode,
)

EnvelopeType = (
    type[RequestEnvelope] | type[ResponseEnvelope] | type[EventEnvelope] | type[ErrorEnvelope]
)
ENVELOPE_TYPES: tuple[EnvelopeType, ...] = (
    RequestEnvelope,
    ResponseEnvelope,
    EventEnvelope,
    ErrorEnvelope,
)


def fast(max_examples: int) -> settings:
    """Settings for the unit tier: a few hundred examples, no per-example deadline."""
    # Drawing nested JSON is most of the cost; the whole file stays within a few seconds.
    return settings(
        max_examples=max_examples, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )


# -- building blocks ------------------------------------------------------------------------

texts = st.text(st.characters(codec="utf-8"), max_size=12)
ids = st.text(string.ascii_letters + string.digits + "_-", min_size=1, max_size=16) | st.just(
    "Z" * 128
)
message_ids = (
    st.uuids().map(str)
    | st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=32)
    | st.sampled_from(["!" * 255, "~" * 255])
)
# orjson writes integers in the signed and unsigned 64-bit ranges, and no NaN or infinity.
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=8,
)
json_objects = st.dictionaries(texts, json_values, max_size=4)
offsets = st.timedeltas(min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23))
datetimes = st.datetimes(
    min_value=datetime(2, 1, 1),
    max_value=datetime(9998, 12, 31),
    timezones=st.one_of(st.none(), offsets.map(timezone)),
)


def free_keys(model: type[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Unknown fields for ``model``: keys that are none of its declared fields."""
    keys = texts.filter(lambda key: key not in model.model_fields)
    return st.dictionaries(keys, json_values, max_size=3)


# -- random input that decode must refuse cleanly -------------------------------------------


def assert_decodes_or_refuses(data: bytes) -> None:
    """Decode ``data``: an envelope comes back, or EnvelopeError; anything else fails."""
    envelope: Envelope | None = None
    refusal: EnvelopeError | None = None
    try:
        envelope = decode(data)
    except EnvelopeError as exc:
        refusal = exc
    if refusal is not None:
        assert refusal.code in {"invalid_envelope", "unsupported_version", "payload_too_large"}
        return
    assert isinstance(envelope, ENVELOPE_TYPES)
    # What was accepted can be written back out and reads the same.
    assert decode(encode(envelope)) == envelope


VALID_BYTES = (
    b'{"protocol_version":"1.0","message_id":"m-1","timestamp":"2024-05-01T12:30:00Z",'
    b'"sender_id":"c","receiver_id":"s","message_type":"request",'
    b'"payload":{"action":"x","parameters":{"k":[1,2.5,"v"]}},"metadata":{"trace":"t"}}'
)


@st.composite
def corrupted_envelopes(draw: st.DrawFn) -> bytes:
    """A valid encoded envelope with a random slice replaced by random bytes."""
    start = draw(st.integers(0, len(VALID_BYTES)))
    end = draw(st.integers(start, min(start + 8, len(VALID_BYTES))))
    return VALID_BYTES[:start] + draw(st.binary(max_size=8)) + VALID_BYTES[end:]


@fast(500)
@given(st.binary(max_size=256) | corrupted_envelopes())
def test_random_bytes_decode_or_raise_envelope_error(data: bytes) -> None:
    """Random or corrupted bytes into decode give an envelope or EnvelopeError, nothing else."""
    assert_decodes_or_refuses(data)


@fast(200)
@given(json_values)
def test_random_json_decodes_or_raises_envelope_error(value: object) -> None:
    """Any JSON value into decode gives an envelope or an EnvelopeError, never another error."""
    assert_decodes_or_refuses(orjson.dumps(value))


def maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly ``valid`` values, one time in ten any JSON value in their place."""
    return st.integers(0, 9).flatmap(lambda n: valid if n else json_values)


def wire_time() -> st.SearchStrategy[Any]:
    """Times as a foreign client might write them, valid or not."""
    return maybe(
        datetimes.map(datetime.isoformat)
        | st.integers(min_value=-(2**40), max_value=2**40)
        | st.sampled_from(["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-01:00"])
    )


payload_fields = {
    "request": {"action": maybe(ids), "parameters": maybe(json_objects)},
    "response": {
        "status": maybe(st.sampled_from([s.value for s in ResponseStatus])),
        "result": json_values,
        "error": maybe(st.none() | json_objects),
    },
    "event": {"event_name": maybe(ids), "event_data": maybe(json_objects)},
    "error": {"code": maybe(texts), "message": maybe(texts), "details": maybe(json_objects)},
}
metadatas = st.fixed_dictionaries(
    {},
    optional={
        "correlation_id": maybe(message_ids),
        "deadline": wire_time(),
        "trace": maybe(texts),
        "tenant": json_values,
    },
)


VERSIONS = ["1.0", "1.0", "1.0", "1.3", "1.3", "2.0", "1", "1.0.0", None]


@st.composite
def envelope_like(draw: st.DrawFn) -> dict[str, Any]:
    """JSON objects shaped like envelopes: the fields there, their values often valid."""
    kind = draw(st.sampled_from(list(payload_fields)))
    # Mostly the payload of the kind, its fields often present; sometimes another kind's.
    payload_kind = draw(st.sampled_from([kind, kind, kind, *payload_fields]))
    payload = st.fixed_dictionaries({}, optional=payload_fields[payload_kind])
    return draw(
        st.fixed_dictionaries(
            {
                "protocol_version": st.sampled_from(VERSIONS),
                "sender_id": maybe(ids),
                "receiver_id": maybe(ids),
                "message_type": maybe(st.just(kind)),
                "payload": maybe(payload),
            },
            optional={
                "message_id": maybe(message_ids),
                "timestamp": wire_time(),
                "metadata": maybe(metadatas),
                "x_unknown": json_values,
            },
        )
    )


@fast(300)
@given(envelope_like())
def test_envelope_shaped_json_decodes_or_raises_envelope_error(obj: dict[str, Any]) -> None:
    """Objects shaped like envelopes, with random field values, decode or raise EnvelopeError."""
    assert_decodes_or_refuses(orjson.dumps(obj))


# -- valid envelopes round-trip exactly -----------------------------------------------------


@st.composite
def metadata_models(draw: st.DrawFn) -> Metadata:
    """Valid metadata, named fields set or not, with free keys."""
    return Metadata.model_validate(
        {
            "correlation_id": draw(st.none() | message_ids),
            "deadline": draw(st.none() | datetimes),
            "trace": draw(st.none() | texts),
            **draw(free_keys(Metadata)),
        }
    )


payload_models = {
    RequestEnvelope: st.builds(
        lambda extra, **fields: RequestPayload.model_validate({**fields, **extra}),
        free_keys(RequestPayload),
        action=ids,
        parameters=json_objects,
    ),
    ResponseEnvelope: st.builds(
        lambda extra, **fields: ResponsePayload.model_validate({**fields, **extra}),
        free_keys(ResponsePayload),
        status=st.sampled_from(ResponseStatus),
        result=json_values,
        error=st.none() | json_objects,
    ),
    EventEnvelope: st.builds(
        lambda extra, **fields: EventPayload.model_validate({**fields, **extra}),
        free_keys(EventPayload),
        event_name=ids,
        event_data=json_objects,
    ),
    ErrorEnvelope: st.builds(
        lambda extra, **fields: ErrorPayload.model_validate({**fields, **extra}),
        free_keys(ErrorPayload),
        code=st.text(st.characters(codec="utf-8"), min_size=1, max_size=128),
        message=texts,
        details=json_objects,
    ),
}


@st.composite
def envelopes(draw: st.DrawFn) -> Envelope:
    """Valid envelopes of every kind, with unknown fields at every level."""
    kind = draw(st.sampled_from(ENVELOPE_TYPES))
    fields = {
        "protocol_version": draw(st.integers(0, 99).map(lambda minor: f"1.{minor}")),
        "message_id": draw(message_ids),
        "timestamp": draw(datetimes),
        "sender_id": draw(ids),
        "receiver_id": draw(ids),
        "payload": draw(payload_models[kind]),
        "metadata": draw(metadata_models()),
    }
    envelope: Envelope = kind.model_validate({**fields, **draw(free_keys(kind))})
    return envelope


@fast(150)
@given(envelopes())
def test_valid_envelopes_round_trip_exactly(envelope: Envelope) -> None:
    """decode(encode(e)) == e for any valid envelope, unknown fields included."""
    data = encode(envelope, max_size=None)

    decoded = decode(data, max_size=None)

    assert type(decoded) is type(envelope)
    assert decoded == envelope
    assert encode(decoded, max_size=None) == data


@fast(150)
@given(envelopes())
def test_encode_writes_what_model_dump_would(envelope: Envelope) -> None:
    """encode's shallow walk writes the very bytes of orjson over model_dump, extras included."""
    assert encode(envelope, max_size=None) == orjson.dumps(
        envelope.model_dump(), option=orjson.OPT_UTC_Z
    )
