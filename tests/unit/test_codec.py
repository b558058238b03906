"""Unit tests of the envelope codec: ``encode`` and ``decode`` against wire contract 1.0."""

from __future__ import annotations

import collections
import dataclasses
import enum
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from agentbus.envelopes import (
    DEFAULT_MAX_SIZE,
    PROTOCOL_VERSION,
    Envelope,
    EnvelopeError,
    ErrorCode,
    ErrorEnvelope,
    ErrorPayload,
    EventEnvelope,
    EventPayload,
    Metadata,
    PayloadTooLarge,
    RequestEnvelope,
    RequestPayload,
    ResponseEnvelope,
    ResponsePayload,
    ResponseStatus,
    UnsupportedVersion,
    decode,
    encode,
    new_message_id,
)

SENT_AT = datetime(2024, 5, 1, 12, 30, 15, 250_000, tzinfo=UTC)
DEADLINE = datetime(2024, 5, 1, 12, 31, tzinfo=UTC)
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
REQUEST_ID = "9b2c6a52-7f0e-4b5e-9a53-3f1a2c8d7e10"

PAYLOADS: dict[str, dict[str, Any]] = {
    "request": {"action": "summarize", "parameters": {"text": "hello", "max_words": 5}},
    "response": {"status": "success", "result": {"summary": "hi"}, "error": None},
    "event": {"event_name": "heartbeat", "event_data": {"load": 0.25}},
    "error": {"code": "unknown_action", "message": "no such action", "details": {"a": 1}},
}
KINDS = list(PAYLOADS)


def wire(kind: str = "request", /, **overrides: Any) -> dict[str, Any]:
    """Return a valid ``kind`` envelope as a foreign client would write it, with ``overrides``."""
    obj: dict[str, Any] = {
        "protocol_version": "1.0",
        "message_id": "m-1",
        "timestamp": "2024-05-01T12:30:15.250000Z",
        "sender_id": "client-1",
        "receiver_id": "summarizer",
        "message_type": kind,
        "payload": dict(PAYLOADS[kind]),
        "metadata": {},
    }
    obj.update(overrides)
    return obj


def raw(obj: object) -> bytes:
    """Serialize any JSON value with orjson, as the bytes on the wire."""
    return orjson.dumps(obj)


def full_metadata(**free: Any) -> Metadata:
    """Return metadata with every named field set, plus free keys."""
    return Metadata.model_validate(
        {"correlation_id": REQUEST_ID, "deadline": DEADLINE, "trace": TRACE, **free}
    )


def sample_envelopes() -> list[Envelope]:
    """Return one fully populated envelope of each kind."""
    common: dict[str, Any] = {
        "message_id": "m-42",
        "timestamp": SENT_AT,
        "sender_id": "agent_a-1",
        "receiver_id": "broadcast",
        "metadata": full_metadata(tenant="acme", hops=[1, 2]),
    }
    return [
        RequestEnvelope(
            payload=RequestPayload(action="summarize", parameters={"text": "é ✓", "n": 3}),
            **common,
        ),
        ResponseEnvelope(
            payload=ResponsePayload(
                status=ResponseStatus.IN_PROGRESS, result=[1, 2.5, None, {"k": True}]
            ),
            **common,
        ),
        EventEnvelope(
            payload=EventPayload(event_name="heartbeat", event_data={"load": 0.5}),
            **common,
        ),
        ErrorEnvelope(
            payload=ErrorPayload(code="timeout", message="too slow", details={"after": 5}),
            **common,
        ),
    ]


# -- round trips ----------------------------------------------------------------------------


@pytest.mark.parametrize("envelope", sample_envelopes(), ids=KINDS)
def test_round_trip_keeps_every_field(envelope: Envelope) -> None:
    """decode(encode(e)) gives back an equal envelope of the same kind, metadata included."""
    decoded = decode(encode(envelope))

    assert type(decoded) is type(envelope)
    assert decoded == envelope
    assert decoded.metadata.correlation_id == REQUEST_ID
    assert decoded.metadata.deadline == DEADLINE
    assert decoded.metadata.trace == TRACE
    assert decoded.metadata.model_extra == {"tenant": "acme", "hops": [1, 2]}


@pytest.mark.parametrize("message_type", KINDS)
def test_decode_foreign_envelope_of_each_kind(message_type: str) -> None:
    """A plain JSON envelope of each kind decodes to its model and re-encodes to the same JSON."""
    obj = wire(message_type, metadata={"correlation_id": REQUEST_ID, "trace": TRACE})

    envelope = decode(raw(obj))

    assert envelope.message_type == message_type
    assert envelope.sender_id == "client-1"
    assert envelope.receiver_id == "summarizer"
    assert envelope.timestamp == SENT_AT
    assert envelope.correlation_id == REQUEST_ID
    assert orjson.loads(encode(envelope)) == obj


def test_encode_writes_the_wire_contract_fields() -> None:
    """encode writes every contract field, the version, UTC times with Z, and no null metadata."""
    envelope = RequestEnvelope(
        sender_id="a",
        receiver_id="b",
        timestamp=SENT_AT,
        payload=RequestPayload(action="do"),
        metadata=Metadata(deadline=DEADLINE),
    )

    obj = orjson.loads(encode(envelope))

    assert obj == {
        "protocol_version": PROTOCOL_VERSION,
        "message_id": envelope.message_id,
        "timestamp": "2024-05-01T12:30:15.250000Z",
        "sender_id": "a",
        "receiver_id": "b",
        "message_type": "request",
        "payload": {"action": "do", "parameters": {}},
        "metadata": {"deadline": "2024-05-01T12:31:00Z"},
    }


@pytest.mark.parametrize(
    "data",
    [
        raw(wire()),
        bytearray(raw(wire())),
        memoryview(raw(wire())),
        raw(wire()).decode(),
    ],
    ids=["bytes", "bytearray", "memoryview", "str"],
)
def test_decode_accepts_bytes_like_and_str(data: bytes | bytearray | memoryview | str) -> None:
    """decode reads bytes, bytearray, memoryview and str alike."""
    envelope = decode(data)

    assert isinstance(envelope, RequestEnvelope)
    assert envelope.payload.action == "summarize"


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.42"])
def test_decode_accepts_any_minor_of_major_one(version: str) -> None:
    """Every 1.x protocol version is read, and the version read is kept."""
    envelope = decode(raw(wire(protocol_version=version)))

    assert envelope.protocol_version == version


def test_decode_accepts_ids_of_128_characters() -> None:
    """Ids of exactly 128 characters from the full id alphabet are valid."""
    long_id = ("aZ09_-" * 22)[:128]
    obj = wire("event", sender_id=long_id, receiver_id=long_id)
    obj["payload"]["event_name"] = long_id

    envelope = decode(raw(obj))

    assert isinstance(envelope, EventEnvelope)
    assert envelope.sender_id == envelope.receiver_id == envelope.payload.event_name == long_id


# -- tolerant reader: unknown fields --------------------------------------------------------


def test_unknown_envelope_fields_survive() -> None:
    """Unknown top-level fields are kept through decode, encode and decode again."""
    extras = {"x_priority": 7, "routing": {"zone": "eu", "hops": [1, None]}, "note": None}
    obj = wire(**extras)

    first = decode(raw(obj))
    second = decode(encode(first))

    assert first.model_extra == extras
    assert second == first
    assert orjson.loads(encode(second)) == obj


@pytest.mark.parametrize("message_type", KINDS)
def test_unknown_payload_fields_survive(message_type: str) -> None:
    """Unknown payload fields of every kind are kept through decode, encode and decode again."""
    obj = wire(message_type)
    obj["payload"]["x_added_in_1_1"] = {"nested": [1, "two", 3.5]}

    first = decode(raw(obj))
    second = decode(encode(first))

    assert first.payload.model_extra == {"x_added_in_1_1": {"nested": [1, "two", 3.5]}}
    assert second == first
    assert orjson.loads(encode(second)) == obj


def test_unknown_metadata_fields_survive() -> None:
    """Free metadata keys are kept alongside the named ones through decode, encode, decode."""
    metadata = {
        "correlation_id": REQUEST_ID,
        "deadline": "2024-05-01T12:31:00Z",
        "trace": TRACE,
        "tenant": "acme",
        "baggage": {"user": "u1", "flags": [True, False]},
    }
    obj = wire("response", metadata=metadata)

    first = decode(raw(obj))
    second = decode(encode(first))

    assert first.metadata.model_extra == {
        "tenant": "acme",
        "baggage": {"user": "u1", "flags": [True, False]},
    }
    assert second == first
    assert orjson.loads(encode(second))["metadata"] == metadata


# -- foreign clients: defaults for message_id and timestamp ---------------------------------


def test_missing_message_id_and_timestamp_get_defaults() -> None:
    """An envelope without message_id and timestamp gets a fresh UUID4 and the receive time."""
    obj = wire()
    del obj["message_id"], obj["timestamp"]
    before = datetime.now(UTC)

    envelope = decode(raw(obj))

    after = datetime.now(UTC)
    assert uuid.UUID(envelope.message_id).version == 4
    assert before <= envelope.timestamp <= after
    assert envelope.timestamp.tzinfo is UTC


def test_missing_message_id_generated_ids_differ() -> None:
    """Each envelope decoded without a message_id gets its own id."""
    obj = wire()
    del obj["message_id"]

    ids = {decode(raw(obj)).message_id for _ in range(3)}

    assert len(ids) == 3


def test_missing_message_id_and_timestamp_use_fallbacks() -> None:
    """The ``message_id=`` and ``received_at=`` fallbacks stand in when the fields are absent."""
    obj = wire()
    del obj["message_id"], obj["timestamp"]

    envelope = decode(raw(obj), message_id="amqp-id-7", received_at=SENT_AT)

    assert envelope.message_id == "amqp-id-7"
    assert envelope.timestamp == SENT_AT


def test_naive_received_at_is_taken_as_utc() -> None:
    """A naive ``received_at`` fallback is read as UTC."""
    obj = wire()
    del obj["timestamp"]

    envelope = decode(raw(obj), received_at=datetime(2024, 5, 1, 12, 30, 15, 250_000))

    assert envelope.timestamp == SENT_AT
    assert envelope.timestamp.tzinfo is UTC


def test_fallbacks_do_not_override_fields_present() -> None:
    """``message_id=`` and ``received_at=`` are ignored when the envelope carries its own."""
    envelope = decode(raw(wire()), message_id="amqp-id-7", received_at=SENT_AT + timedelta(hours=1))

    assert envelope.message_id == "m-1"
    assert envelope.timestamp == SENT_AT


# -- timestamps -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "2024-05-01T12:30:15.25Z",
        "2024-05-01T12:30:15.250+00:00",
        "2024-05-01T14:30:15.25+02:00",
        "2024-05-01T07:00:15.25-05:30",
        "2024-05-02T00:30:15.25+12:00",
    ],
    ids=["Z", "+00:00", "+02:00", "-05:30", "+12:00-next-day"],
)
def test_timestamps_with_offsets_are_normalised_to_utc(text: str) -> None:
    """Timestamps and deadlines with any offset decode to UTC and encode with a Z."""
    envelope = decode(raw(wire(timestamp=text, metadata={"deadline": text})))

    assert envelope.timestamp == SENT_AT
    assert envelope.timestamp.utcoffset() == timedelta(0)
    assert envelope.metadata.deadline == SENT_AT
    assert envelope.metadata.deadline.utcoffset() == timedelta(0)
    obj = orjson.loads(encode(envelope))
    assert obj["timestamp"] == "2024-05-01T12:30:15.250000Z"
    assert obj["metadata"]["deadline"] == "2024-05-01T12:30:15.250000Z"


def test_naive_timestamps_on_the_wire_are_taken_as_utc() -> None:
    """A timestamp or deadline without an offset is read as UTC."""
    naive = "2024-05-01T12:30:15.250"

    envelope = decode(raw(wire(timestamp=naive, metadata={"deadline": naive})))

    assert envelope.timestamp == SENT_AT
    assert envelope.timestamp.tzinfo is UTC
    assert envelope.metadata.deadline == SENT_AT
    assert orjson.loads(encode(envelope))["timestamp"] == "2024-05-01T12:30:15.250000Z"


def test_naive_datetimes_given_in_python_are_taken_as_utc() -> None:
    """A naive datetime passed to a model is read as UTC, not as local time."""
    naive = datetime(2024, 5, 1, 12, 30, 15, 250_000)

    envelope = EventEnvelope(
        sender_id="a",
        receiver_id="b",
        timestamp=naive,
        payload=EventPayload(event_name="tick"),
        metadata=Metadata(deadline=naive),
    )

    assert envelope.timestamp == SENT_AT
    assert envelope.metadata.deadline == SENT_AT
    assert orjson.loads(encode(envelope))["timestamp"].endswith("Z")


# -- replies --------------------------------------------------------------------------------


def traced_request() -> RequestEnvelope:
    """Return a request with a trace and free metadata, as a client would send it."""
    return RequestEnvelope(
        message_id=REQUEST_ID,
        sender_id="client-1",
        receiver_id="summarizer",
        payload=RequestPayload(action="summarize"),
        metadata=Metadata(trace=TRACE),
    )


def test_response_is_correlated_to_its_request() -> None:
    """response() answers the sender, correlates to the request's id and carries the trace."""
    request = traced_request()

    response = request.response({"summary": "hi"}, sender_id="summarizer-7")

    assert isinstance(response, ResponseEnvelope)
    assert response.correlation_id == request.message_id
    assert response.metadata.correlation_id == REQUEST_ID
    assert response.receiver_id == request.sender_id
    assert response.sender_id == "summarizer-7"
    assert response.metadata.trace == TRACE
    assert response.payload.status is ResponseStatus.SUCCESS
    assert response.result == {"summary": "hi"}
    assert response.message_id != request.message_id
    assert decode(encode(response)) == response


def test_response_status_can_be_set() -> None:
    """response() takes a status other than success."""
    response = traced_request().response(
        None, sender_id="summarizer-7", status=ResponseStatus.IN_PROGRESS
    )

    assert response.payload.status is ResponseStatus.IN_PROGRESS
    assert orjson.loads(encode(response))["payload"]["status"] == "in_progress"


def test_error_is_correlated_to_its_request() -> None:
    """error() answers the sender, correlates to the request's id and carries the trace."""
    request = traced_request()

    error = request.error(
        ErrorCode.INVALID_PARAMETERS, "text is required", sender_id="s-1", details={"f": "text"}
    )

    assert isinstance(error, ErrorEnvelope)
    assert error.correlation_id == REQUEST_ID
    assert error.receiver_id == "client-1"
    assert error.sender_id == "s-1"
    assert error.metadata.trace == TRACE
    assert error.payload.code == "invalid_parameters"
    assert error.payload.message == "text is required"
    assert error.payload.details == {"f": "text"}
    assert orjson.loads(encode(error))["payload"]["code"] == "invalid_parameters"


def test_reply_to_an_untraced_request_has_no_trace() -> None:
    """A reply to a request without a trace has none, and no trace key on the wire."""
    request = RequestEnvelope(sender_id="c", receiver_id="s", payload=RequestPayload(action="x"))

    response = request.response(1, sender_id="s")
    error = request.error("custom_code", "nope", sender_id="s")

    assert response.metadata.trace is None
    assert error.metadata.trace is None
    assert error.payload.details == {}
    assert orjson.loads(encode(response))["metadata"] == {"correlation_id": request.message_id}


# -- size cap -------------------------------------------------------------------------------


def padded_request(size: int) -> RequestEnvelope:
    """Return a request whose encoding is exactly ``size`` bytes."""
    envelope = RequestEnvelope(
        sender_id="a", receiver_id="b", payload=RequestPayload(action="x", parameters={"pad": ""})
    )
    pad = size - len(encode(envelope, max_size=None))
    envelope.payload.parameters["pad"] = "x" * pad
    assert len(encode(envelope, max_size=None)) == size
    return envelope


def test_decode_at_the_default_cap_is_accepted() -> None:
    """An envelope of exactly DEFAULT_MAX_SIZE bytes decodes."""
    data = encode(padded_request(DEFAULT_MAX_SIZE))

    envelope = decode(data)

    assert isinstance(envelope, RequestEnvelope)
    assert len(data) == DEFAULT_MAX_SIZE


def test_decode_one_byte_over_the_default_cap_is_refused() -> None:
    """An envelope one byte over DEFAULT_MAX_SIZE raises PayloadTooLarge."""
    data = encode(padded_request(DEFAULT_MAX_SIZE + 1), max_size=None)

    with pytest.raises(PayloadTooLarge) as info:
        decode(data)

    assert info.value.code == "payload_too_large"
    assert info.value.details == {"size": DEFAULT_MAX_SIZE + 1, "max_size": DEFAULT_MAX_SIZE}


def test_decode_cap_is_configurable() -> None:
    """``max_size=`` moves the cap: at it is fine, one byte over raises PayloadTooLarge."""
    data = raw(wire())

    assert isinstance(decode(data, max_size=len(data)), RequestEnvelope)
    with pytest.raises(PayloadTooLarge) as info:
        decode(data, max_size=len(data) - 1)
    assert info.value.code == "payload_too_large"
    assert isinstance(info.value, EnvelopeError)


def test_decode_cap_none_disables_it() -> None:
    """``max_size=None`` reads an envelope over the default cap."""
    data = encode(padded_request(DEFAULT_MAX_SIZE + 1), max_size=None)

    envelope = decode(data, max_size=None)

    assert isinstance(envelope, RequestEnvelope)


def test_encode_at_the_cap_is_accepted() -> None:
    """encode writes an envelope of exactly DEFAULT_MAX_SIZE bytes."""
    data = encode(padded_request(DEFAULT_MAX_SIZE))

    assert len(data) == DEFAULT_MAX_SIZE


def test_encode_over_the_cap_is_refused() -> None:
    """encode raises PayloadTooLarge one byte over the default or a configured cap."""
    small = RequestEnvelope(sender_id="a", receiver_id="b", payload=RequestPayload(action="x"))
    size = len(encode(small))

    with pytest.raises(PayloadTooLarge) as default_cap:
        encode(padded_request(DEFAULT_MAX_SIZE + 1))
    with pytest.raises(PayloadTooLarge) as configured_cap:
        encode(small, max_size=size - 1)

    assert default_cap.value.code == configured_cap.value.code == "payload_too_large"
    assert configured_cap.value.details == {"size": size, "max_size": size - 1}
    assert len(encode(small, max_size=size)) == size
    assert len(encode(padded_request(DEFAULT_MAX_SIZE + 1), max_size=None)) > DEFAULT_MAX_SIZE


# -- encode of values that are not JSON -----------------------------------------------------


class Opaque:
    """An object with no JSON form."""


@pytest.mark.parametrize(
    "result",
    [
        Opaque(),
        {1, 2},
        b"bytes",
        Decimal("1.5"),
        {1: "int key"},
        2**70,
        "lone surrogate \ud800",
    ],
    ids=["object", "set", "bytes", "decimal", "int-key", "int-over-64-bits", "surrogate"],
)
def test_encode_of_a_non_json_result_raises_envelope_error(result: object) -> None:
    """encode raises EnvelopeError (invalid_envelope) for a result JSON cannot hold."""
    envelope = ResponseEnvelope(
        sender_id="a", receiver_id="b", payload=ResponsePayload(result=result)
    )

    with pytest.raises(EnvelopeError) as info:
        encode(envelope)

    assert type(info.value) is EnvelopeError
    assert info.value.code == "invalid_envelope"
    assert isinstance(info.value.__cause__, TypeError)


class Point(BaseModel):
    """A handler's own result model."""

    x: int
    at: datetime | None = None


@dataclasses.dataclass
class Pair:
    left: int
    right: str


class Colour(enum.Enum):
    RED = "red"


Span = collections.namedtuple("Span", "start end")


@pytest.mark.parametrize(
    "result",
    [
        Point(x=1, at=SENT_AT),
        {"points": [Point(x=2)], "pair": Pair(1, "a")},
        Pair(3, "b"),
        Colour.RED,
        uuid.UUID(REQUEST_ID),
        Span(Point(x=4), [Pair(5, "c")]),
        (1, "two", None),
        datetime(2024, 5, 1, 12, 0),
        {"big": "x" * 100_000, "nested": {"deep": [[[1.5]]]}},
    ],
    ids=["model", "nested", "dataclass", "enum", "uuid", "named-tuple", "tuple", "naive", "large"],
)
def test_encode_of_python_values_matches_model_dump(result: object) -> None:
    """Values in a payload are written as pydantic's model_dump of the envelope writes them."""
    envelope = ResponseEnvelope(
        sender_id="a",
        receiver_id="b",
        payload=ResponsePayload(result=result),
        metadata=full_metadata(tenant="acme"),
    )

    expected = orjson.dumps(envelope.model_dump(), option=orjson.OPT_UTC_Z)

    assert encode(envelope, max_size=None) == expected


def test_encode_leaves_the_envelope_unchanged() -> None:
    """encode does not alter the envelope or the payload objects it writes by reference."""
    parameters = {"items": [{"n": 1}], "note": "x"}
    envelope = RequestEnvelope(
        sender_id="a",
        receiver_id="b",
        payload=RequestPayload(action="go", parameters=parameters),
        metadata=full_metadata(tenant="acme"),
    )
    before = envelope.model_copy(deep=True)

    encode(envelope)

    assert envelope == before
    assert envelope.payload.parameters == {"items": [{"n": 1}], "note": "x"}
    assert envelope.metadata.model_extra == {"tenant": "acme"}


def test_new_message_ids_are_uuid4_strings() -> None:
    """new_message_id returns distinct canonical UUID4 strings."""
    ids = [new_message_id() for _ in range(2000)]

    parsed = [uuid.UUID(value) for value in ids]

    assert len(set(ids)) == len(ids)
    assert all(u.version == 4 and u.variant == uuid.RFC_4122 for u in parsed)
    assert [str(u) for u in parsed] == ids


# -- bad input, one test per class ----------------------------------------------------------


def assert_invalid(data: bytes, expected: type[EnvelopeError] = EnvelopeError) -> EnvelopeError:
    """Decode ``data``, check it raises exactly ``expected`` with its code, return the error."""
    with pytest.raises(EnvelopeError) as info:
        decode(data)
    assert type(info.value) is expected
    assert info.value.code == expected.code
    return info.value


@pytest.mark.parametrize(
    "data",
    [b"", b"   ", b"not json", b"{", b'{"a": 1,}', b"{'a': 1}", b"NaN", b'{"a": 1} {}'],
    ids=["empty", "blank", "text", "truncated", "trailing-comma", "single-quotes", "nan", "two"],
)
def test_not_json_is_invalid_envelope(data: bytes) -> None:
    """Bytes that are not JSON raise EnvelopeError (invalid_envelope), with no raw object."""
    error = assert_invalid(data)

    assert error.code == "invalid_envelope"
    assert error.raw is None


@pytest.mark.parametrize(
    "data",
    [
        b'{"protocol_version": "1.0", "sender_id": "caf\xe9"}',
        b"\xff\xfe{}",
        b'{"a": "\xed\xa0\x80"}',
        b'{"a": "\\ud800"}',
    ],
    ids=["latin-1", "bom-bytes", "encoded-surrogate", "escaped-lone-surrogate"],
)
def test_invalid_utf8_is_invalid_envelope(data: bytes) -> None:
    """Bytes that are not valid UTF-8 raise EnvelopeError (invalid_envelope)."""
    error = assert_invalid(data)

    assert error.code == "invalid_envelope"
    assert error.raw is None


@pytest.mark.parametrize(
    "value",
    [[], [wire()], "an envelope", 42, 1.5, None, True],
    ids=["empty-array", "array", "string", "int", "float", "null", "bool"],
)
def test_json_that_is_not_an_object_is_invalid_envelope(value: object) -> None:
    """A JSON value other than an object raises EnvelopeError (invalid_envelope)."""
    error = assert_invalid(raw(value))

    assert error.code == "invalid_envelope"
    assert error.raw is None
    assert "JSON object" in error.message


@pytest.mark.parametrize(
    "obj",
    [
        {k: v for k, v in wire().items() if k != "protocol_version"},
        wire(protocol_version=None),
        wire(protocol_version=1.0),
        wire(protocol_version=["1.0"]),
    ],
    ids=["absent", "null", "number", "array"],
)
def test_missing_protocol_version_is_invalid_envelope(obj: dict[str, Any]) -> None:
    """An envelope without a string protocol_version raises EnvelopeError (invalid_envelope)."""
    error = assert_invalid(raw(obj))

    assert error.details == {"field": "protocol_version"}
    assert error.raw == obj


@pytest.mark.parametrize(
    "version",
    ["1", "v1.0", "1.0.0", "", " 1.0", "1.0 ", "1.x", "1,0", "\u0661.0", "1.0\n"],
    ids=[
        "major-only",
        "v-prefix",
        "patch",
        "empty",
        "leading-space",
        "trailing-space",
        "x-minor",
        "comma",
        "arabic-digit",
        "trailing-newline",
    ],
)
def test_malformed_protocol_version_is_invalid_envelope(version: str) -> None:
    """A protocol_version that is not MAJOR.MINOR raises EnvelopeError, not UnsupportedVersion."""
    obj = wire(protocol_version=version)

    error = assert_invalid(raw(obj))

    assert error.code == "invalid_envelope"
    assert error.raw == obj


@pytest.mark.parametrize("version", ["2.0", "0.9", "10.1", "2.15"])
def test_another_major_version_is_unsupported_version(version: str) -> None:
    """A protocol_version of another MAJOR raises UnsupportedVersion (unsupported_version)."""
    obj = wire(protocol_version=version)

    error = assert_invalid(raw(obj), UnsupportedVersion)

    assert error.code == "unsupported_version"
    assert error.details["protocol_version"] == version
    assert error.raw == obj


@pytest.mark.parametrize(
    "obj",
    [
        {k: v for k, v in wire().items() if k != "message_type"},
        wire(message_type=None),
        wire(message_type="command"),
        wire(message_type="Request"),
        wire(message_type=1),
        wire(message_type=["request"]),
        wire(message_type={"request": True}),
    ],
    ids=["absent", "null", "unknown", "wrong-case", "number", "array", "object"],
)
def test_missing_or_unknown_message_type_is_invalid_envelope(obj: dict[str, Any]) -> None:
    """An envelope without a known message_type raises EnvelopeError (invalid_envelope)."""
    error = assert_invalid(raw(obj))

    assert error.details == {"field": "message_type"}
    assert error.raw == obj


@pytest.mark.parametrize(
    "obj",
    [
        {k: v for k, v in wire().items() if k != "sender_id"},
        wire(sender_id=None),
        wire(sender_id=7),
    ],
    ids=["absent", "null", "number"],
)
def test_missing_sender_id_is_invalid_envelope(obj: dict[str, Any]) -> None:
    """An envelope without a string sender_id raises EnvelopeError (invalid_envelope)."""
    error = assert_invalid(raw(obj))

    fields = [e["field"] for e in error.details["errors"]]
    assert fields == ["sender_id"]
    assert error.raw == obj


ID_FIELDS = {
    "sender_id": ("request", ()),
    "receiver_id": ("request", ()),
    "action": ("request", ("payload",)),
    "event_name": ("event", ("payload",)),
}
BAD_IDS = {
    "dot": "agent.one",
    "space": "agent one",
    "129-chars": "a" * 129,
    "empty": "",
    "slash": "a/b",
    "non-ascii": "agént",
    "trailing-newline": "agent\n",
}


@pytest.mark.parametrize("bad_id", BAD_IDS.values(), ids=BAD_IDS.keys())
@pytest.mark.parametrize("field", ID_FIELDS)
def test_bad_id_grammar_is_invalid_envelope(field: str, bad_id: str) -> None:
    """An id outside [A-Za-z0-9_-]{1,128} raises EnvelopeError naming the field."""
    message_type, path = ID_FIELDS[field]
    obj = wire(message_type)
    target = obj["payload"] if path else obj
    target[field] = bad_id

    error = assert_invalid(raw(obj))

    fields = [e["field"] for e in error.details["errors"]]
    assert fields == [".".join((*path, field))]
    assert error.raw == obj


def with_payload(message_type: str, **changes: Any) -> dict[str, Any]:
    """Return a valid envelope whose payload has ``changes`` applied (``None`` drops a key)."""
    obj = wire(message_type)
    for key, value in changes.items():
        if value is None:
            del obj["payload"][key]
        else:
            obj["payload"][key] = value
    return obj


WRONG_PAYLOADS = {
    "payload-absent": {k: v for k, v in wire().items() if k != "payload"},
    "payload-array": wire(payload=[]),
    "payload-string": wire(payload="summarize"),
    "payload-null": wire(payload=None),
    "request-without-action": with_payload("request", action=None),
    "request-action-number": with_payload("request", action=3),
    "request-parameters-array": with_payload("request", parameters=["text"]),
    "request-parameters-string": with_payload("request", parameters="text=hi"),
    "response-bad-status": with_payload("response", status="done"),
    "response-status-wrong-case": with_payload("response", status="SUCCESS"),
    "response-error-string": with_payload("response", error="boom"),
    "event-without-event-name": with_payload("event", event_name=None),
    "event-data-array": with_payload("event", event_data=[1]),
    "error-without-code": with_payload("error", code=None),
    "error-empty-code": with_payload("error", code=""),
    "error-without-message": with_payload("error", message=None),
    "error-details-string": with_payload("error", details="oops"),
    "request-with-event-payload": wire("request", payload=PAYLOADS["event"]),
}


@pytest.mark.parametrize("obj", WRONG_PAYLOADS.values(), ids=WRONG_PAYLOADS.keys())
def test_wrong_payload_shape_is_invalid_envelope(obj: dict[str, Any]) -> None:
    """A payload that does not fit its message_type raises EnvelopeError naming the payload."""
    error = assert_invalid(raw(obj))

    fields = [e["field"] for e in error.details["errors"]]
    assert fields
    assert all(f.startswith("payload") for f in fields)
    assert error.raw == obj


@pytest.mark.parametrize(
    "message_id",
    ["has space", "x" * 256, "", "tab\there", "ünïcode", None, 12345],
    ids=["space", "256-chars", "empty", "tab", "non-ascii", "null", "number"],
)
def test_bad_message_id_is_invalid_envelope(message_id: object) -> None:
    """A message_id that is not 1 to 255 printable ASCII characters raises EnvelopeError."""
    obj = wire(message_id=message_id)

    error = assert_invalid(raw(obj))

    fields = [e["field"] for e in error.details["errors"]]
    assert fields == ["message_id"]
    assert error.raw == obj


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("timestamp", "yesterday"),
        ("timestamp", True),
        ("timestamp", "2024-13-01T00:00:00Z"),
        ("timestamp", "0001-01-01T00:00:00+05:00"),
        ("timestamp", "9999-12-31T23:59:59-05:00"),
        ("deadline", "soon"),
        ("deadline", "0001-01-01T00:00:00+05:00"),
        ("correlation_id", "has space"),
        ("trace", 17),
    ],
    ids=[
        "timestamp-text",
        "timestamp-bool",
        "timestamp-month-13",
        "timestamp-before-year-1-in-utc",
        "timestamp-after-year-9999-in-utc",
        "deadline-text",
        "deadline-before-year-1-in-utc",
        "correlation-id-space",
        "trace-number",
    ],
)
def test_bad_time_or_metadata_is_invalid_envelope(field: str, value: object) -> None:
    """A bad timestamp or named metadata field raises EnvelopeError, never another error."""
    obj = wire(timestamp=value) if field == "timestamp" else wire(metadata={field: value})

    error = assert_invalid(raw(obj))

    fields = [e["field"] for e in error.details["errors"]]
    expected = "timestamp" if field == "timestamp" else f"metadata.{field}"
    assert fields == [expected]


def nested(depth: int, leaf: bytes = b"1") -> bytes:
    """Return JSON bytes of ``depth`` nested objects around ``leaf``."""
    return b'{"a":' * depth + leaf + b"}" * depth


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 5000 + b"]" * 5000,
        nested(5000),
        raw(wire())[:-1] + b',"deep":' + nested(5000) + b"}",
        raw(wire()).replace(b'"parameters":{', b'"parameters":{"deep":' + nested(5000) + b","),
    ],
    ids=["arrays", "objects", "in-unknown-field", "in-parameters"],
)
def test_deeply_nested_json_is_invalid_envelope(data: bytes) -> None:
    """JSON nested 5000 levels deep raises EnvelopeError, not RecursionError."""
    error = assert_invalid(data)

    assert error.code == "invalid_envelope"


@pytest.mark.parametrize(
    "obj",
    [
        wire(protocol_version="1"),
        wire(protocol_version="3.0"),
        wire(message_type="command"),
        wire(sender_id="a.b"),
        with_payload("request", action=None),
    ],
    ids=["malformed-version", "other-major", "unknown-type", "bad-sender", "bad-payload"],
)
def test_envelope_error_raw_holds_the_parsed_object(obj: dict[str, Any]) -> None:
    """When the bytes were a JSON object, EnvelopeError.raw is that object, to answer to."""
    with pytest.raises(EnvelopeError) as info:
        decode(raw(obj))

    assert info.value.raw == obj
    assert info.value.raw is not None
    assert info.value.raw["message_id"] == "m-1"
    assert info.value.raw["sender_id"] == obj["sender_id"]


def _nested_in_an_unknown_field(depth: int) -> bytes:
    # One level is the envelope object itself: the field's value adds depth - 1.
    inner = b"[" * (depth - 1) + b"]" * (depth - 1)
    return raw(wire())[:-1] + b', "deep": ' + inner + b"}"


@pytest.mark.parametrize("as_type", [bytes, bytearray, memoryview, lambda b: b.decode()])
def test_nesting_that_cannot_be_written_back_is_invalid_envelope(as_type: Any) -> None:
    """254 levels (what orjson writes) round-trip; 255 (orjson reads up to 1,024) is refused."""
    deepest = decode(as_type(_nested_in_an_unknown_field(254)))
    error = assert_invalid(as_type(_nested_in_an_unknown_field(255)))

    assert decode(encode(deepest)) == deepest
    assert error.code == "invalid_envelope"
    assert "nested deeper than 254 levels" in error.message


def test_many_brackets_that_are_not_deep_are_accepted() -> None:
    """The depth check looks at nesting, not at how many arrays and objects there are."""
    envelope = decode(raw(wire(payload={"action": "go", "parameters": {"rows": [{}] * 5_000}})))

    assert isinstance(envelope, RequestEnvelope)
    assert len(envelope.payload.parameters["rows"]) == 5_000
