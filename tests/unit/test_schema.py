"""Unit tests of the envelope JSON Schema and the ``agentbus schema`` command."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator

from agentbus.cli import cli
from agentbus.envelopes import (
    PROTOCOL_VERSION,
    Envelope,
    EnvelopeError,
    ErrorCode,
    EventEnvelope,
    EventPayload,
    Metadata,
    RequestEnvelope,
    RequestPayload,
    decode,
    encode,
    envelope_schema,
)

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    """A Draft 2020-12 validator of the envelope schema."""
    return Draft202012Validator(envelope_schema())


def request() -> RequestEnvelope:
    """Return a request with metadata and an unknown field."""
    return RequestEnvelope.model_validate(
        {
            "sender_id": "client-1",
            "receiver_id": "summarizer",
            "payload": RequestPayload(action="summarize", parameters={"text": "hi"}),
            "metadata": Metadata(trace="00-abc-def-01", deadline=datetime(2030, 1, 1, tzinfo=UTC)),
            "x_priority": 3,
        }
    )


def encoded_envelopes() -> dict[str, dict[str, Any]]:
    """Return one encoded envelope of each kind, as JSON objects."""
    req = request()
    event = EventEnvelope(
        sender_id="agent-1",
        receiver_id="broadcast",
        payload=EventPayload(event_name="heartbeat", event_data={"load": 0.5}),
    )
    kinds: dict[str, Envelope] = {
        "request": req,
        "response": req.response({"summary": "hi"}, sender_id="summarizer-1"),
        "event": event,
        "error": req.error(ErrorCode.TIMEOUT, "too slow", sender_id="summarizer-1"),
    }
    return {name: orjson.loads(encode(envelope)) for name, envelope in kinds.items()}


ENCODED = encoded_envelopes()


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    """envelope_schema() is a valid Draft 2020-12 schema that names its draft and version."""
    schema = envelope_schema()

    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == DRAFT_2020_12
    assert schema["$id"].endswith(f"/{PROTOCOL_VERSION}")


@pytest.mark.parametrize("obj", ENCODED.values(), ids=ENCODED.keys())
def test_encoded_envelopes_of_every_kind_validate(
    validator: Draft202012Validator, obj: dict[str, Any]
) -> None:
    """What encode writes, for each kind, is valid against the schema."""
    errors = list(validator.iter_errors(obj))

    assert errors == []


def test_foreign_envelope_without_id_and_timestamp_validates(
    validator: Draft202012Validator,
) -> None:
    """A foreign client's minimal envelope, without message_id and timestamp, is valid."""
    obj = {
        "protocol_version": "1.0",
        "sender_id": "curl-client",
        "receiver_id": "summarizer",
        "message_type": "request",
        "payload": {"action": "summarize", "parameters": {}},
        "x_future_field": {"any": ["thing"]},
    }

    assert validator.is_valid(obj)
    assert isinstance(decode(orjson.dumps(obj)), RequestEnvelope)


def without(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """Return ``obj`` without ``key``."""
    return {k: v for k, v in obj.items() if k != key}


REQUEST = ENCODED["request"]
REJECTED = {
    "message-type-unknown": {**REQUEST, "message_type": "command"},
    "message-type-number": {**REQUEST, "message_type": 1},
    "message-type-absent": without(REQUEST, "message_type"),
    "response-message-type-absent": without(ENCODED["response"], "message_type"),
    "sender-id-dot": {**REQUEST, "sender_id": "agent.one"},
    "sender-id-space": {**REQUEST, "sender_id": "agent one"},
    "sender-id-empty": {**REQUEST, "sender_id": ""},
    "sender-id-129-chars": {**REQUEST, "sender_id": "a" * 129},
    "sender-id-absent": without(REQUEST, "sender_id"),
    "protocol-version-absent": without(REQUEST, "protocol_version"),
    "protocol-version-2": {**REQUEST, "protocol_version": "2.0"},
    "request-without-action": {**REQUEST, "payload": {"parameters": {}}},
    "message-id-space": {**REQUEST, "message_id": "has space"},
}


@pytest.mark.parametrize("obj", REJECTED.values(), ids=REJECTED.keys())
def test_schema_rejects_what_decode_rejects(
    validator: Draft202012Validator, obj: dict[str, Any]
) -> None:
    """An envelope decode refuses, such as a bad message_type or sender_id, fails the schema."""
    with pytest.raises(EnvelopeError):
        decode(orjson.dumps(obj))

    assert not validator.is_valid(obj)


def test_cli_schema_prints_the_envelope_schema() -> None:
    """``agentbus schema`` exits 0 and prints envelope_schema() as JSON."""
    result = CliRunner().invoke(cli, ["schema"])

    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout) == envelope_schema()


def test_cli_schema_envelope_is_the_default() -> None:
    """``agentbus schema envelope`` prints the same document as ``agentbus schema``."""
    runner = CliRunner()

    explicit = runner.invoke(cli, ["schema", "envelope"])
    default = runner.invoke(cli, ["schema"])

    assert explicit.exit_code == 0
    assert explicit.stdout == default.stdout


def test_cli_schema_refuses_an_unknown_document() -> None:
    """``agentbus schema`` of something other than the envelope is a usage error."""
    result = CliRunner().invoke(cli, ["schema", "registry"])

    assert result.exit_code == 2
    assert result.stdout == ""


def test_console_script_prints_the_schema() -> None:
    """The installed ``agentbus`` console script prints the Draft 2020-12 schema."""
    script = Path(sys.executable).parent / "agentbus"

    completed = subprocess.run(
        [str(script), "schema"], capture_output=True, check=False, timeout=60
    )

    assert completed.returncode == 0, completed.stderr.decode()
    document = orjson.loads(completed.stdout)
    assert document["$schema"] == DRAFT_2020_12
    assert document == envelope_schema()
