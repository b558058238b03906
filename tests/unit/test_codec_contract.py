"""The codec's fast dump (envelopes/_dump.py) against pydantic: fails the day pydantic moves."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest
from pydantic import BaseModel

from agentbus.envelopes import Envelope as AnyEnvelope
from agentbus.envelopes import (
    ErrorEnvelope,
    ErrorPayload,
    EventEnvelope,
    EventPayload,
    Metadata,
    RequestEnvelope,
    RequestPayload,
    ResponseEnvelope,
    ResponsePayload,
    encode,
)

SENT_AT = datetime(2026, 11, 24, 20, 12, 40, 123456, tzinfo=UTC)


class Report(BaseModel):
    """A handler's result as a model, itself holding a model and a datetime."""

    title: str
    at: datetime
    parts: list[Metadata]


def _metadata() -> Metadata:
    return Metadata.model_validate(
        {"correlation_id": "m-0", "deadline": SENT_AT, "trace": "00-ab-cd-01", "hop": 3}
    )


def _envelopes() -> list[AnyEnvelope]:
    common = {"sender_id": "a-1", "receiver_id": "b", "timestamp": SENT_AT, "x-extra": [1, 2]}
    report = Report(title="t", at=SENT_AT, parts=[Metadata(trace="x")])
    return [
        RequestEnvelope.model_validate(
            common
            | {
                "payload": RequestPayload.model_validate(
                    {"action": "go", "parameters": {"n": 1, "deep": {"a": [None, 1.5]}}, "pri": 9}
                ),
                "metadata": _metadata(),
            }
        ),
        RequestEnvelope.model_validate(
            {"sender_id": "a-1", "receiver_id": "b", "payload": {"action": "bare"}}
        ),
        ResponseEnvelope.model_validate(
            common
            | {
                "payload": ResponsePayload(status="success", result=report),
                "metadata": Metadata(correlation_id="m-0"),
            }
        ),
        ResponseEnvelope.model_validate(
            common | {"payload": ResponsePayload(status="in_progress", result=[report, "x"])}
        ),
        EventEnvelope.model_validate(
            common
            | {"payload": EventPayload(event_name="e", event_data={"when": "now", "k": [True]})}
        ),
        ErrorEnvelope.model_validate(
            common
            | {
                "payload": ErrorPayload(code="timeout", message="late", details={"s": 5}),
                "metadata": Metadata(correlation_id="m-0"),
            }
        ),
    ]


@pytest.mark.parametrize("envelope", _envelopes(), ids=lambda e: e.message_type)
def test_encode_equals_orjson_over_model_dump_json(envelope: AnyEnvelope) -> None:
    """The fast dump writes the bytes of orjson over model_dump(mode="json"): extras, models."""
    expected = orjson.dumps(envelope.model_dump(mode="json"), option=orjson.OPT_UTC_Z)

    assert encode(envelope, max_size=None) == expected


@pytest.mark.parametrize("envelope", _envelopes(), ids=lambda e: e.message_type)
def test_encode_equals_orjson_over_model_dump(envelope: AnyEnvelope) -> None:
    """...and of orjson over the Python-mode model_dump (what a reader re-encoding sees)."""
    expected = orjson.dumps(envelope.model_dump(), option=orjson.OPT_UTC_Z)

    assert encode(envelope, max_size=None) == expected


def _wire_models() -> list[type[BaseModel]]:
    return [
        Metadata,
        RequestPayload,
        ResponsePayload,
        EventPayload,
        ErrorPayload,
        RequestEnvelope,
        ResponseEnvelope,
        EventEnvelope,
        ErrorEnvelope,
    ]


@pytest.mark.parametrize("model", _wire_models(), ids=lambda m: m.__name__)
def test_wire_models_have_nothing_the_fast_dump_would_miss(model: type[BaseModel]) -> None:
    """No aliases, serializers or computed fields: model_dump would apply them, __dict__ not."""
    decorators = model.__pydantic_decorators__

    assert all(
        info.alias is None and info.serialization_alias is None
        for info in model.model_fields.values()
    )
    assert not decorators.field_serializers
    assert not decorators.model_serializers
    assert not model.model_computed_fields
    assert model.model_config.get("extra") == "allow"


@pytest.mark.parametrize("envelope", _envelopes(), ids=lambda e: e.message_type)
def test_field_values_live_in_dict_and_extras_in_pydantic_extra(envelope: AnyEnvelope) -> None:
    """Where the fast dump reads: __dict__ holds the fields, __pydantic_extra__ the rest."""
    assert envelope.__dict__.keys() == type(envelope).model_fields.keys()
    assert envelope.__pydantic_extra__ == {"x-extra": [1, 2]} or not envelope.__pydantic_extra__
