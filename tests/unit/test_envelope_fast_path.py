"""The codec's fast path against its full path: the same envelope or the same refusal, always.

``decode`` takes a common envelope straight to its kind's validator and ``encode`` writes a
plain envelope's dict in one step (envelopes/_fast.py); ``decode_full`` and ``encode_full``
are the paths every input could take. Both are fed the fuzz corpus and hypothesis-made
envelopes, valid and near-valid (fields missing, of the wrong type, unknown, oversize,
bad ids, odd times and versions, unicode, duplicate keys, numbers orjson reads its own way,
deep and merely bracket-heavy JSON), as bytes, str, bytearray and memoryview. Each must
give the same envelope, compared with its types, unknown fields and fields set, and the
same bytes when written again, or the same error: class, code, message, details, raw.
"""

from __future__ import annotations

import copy
import json
import string
from collections import namedtuple
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from enum import Enum
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from agentbus.envelopes import (
    DEFAULT_MAX_SIZE,
    EnvelopeError,
    ErrorCode,
    ErrorEnvelope,
    ErrorPayload,
    EventEnvelope,
    Metadata,
    RequestEnvelope,
    RequestPayload,
    ResponseStatus,
    _codec,
    _fast,
    decode,
    encode,
)
from agentbus.envelopes._codec import decode_full, encode_full
from agentbus.envelopes._dump import wire_dict

CORPUS = Path(__file__).resolve().parents[2] / "fuzz" / "corpus"
FALLBACK_ID = "fallback-id-1"
RECEIVED_AT = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
KINDS = ("request", "response", "event", "error")


def examples(count: int) -> settings:
    return settings(
        max_examples=count,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# -- what is compared -----------------------------------------------------------------------


def state(value: Any) -> Any:
    """``value`` as nested tuples that differ wherever the values or their types differ."""
    if isinstance(value, BaseModel):
        return (
            type(value),
            tuple((name, state(item)) for name, item in value.__dict__.items()),
            tuple((name, state(item)) for name, item in (value.__pydantic_extra__ or {}).items()),
            frozenset(value.model_fields_set),
            value.__pydantic_private__,
        )
    if isinstance(value, dict):
        return (dict, tuple((key, state(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return (type(value), tuple(state(item) for item in value))
    if isinstance(value, datetime):
        # tzinfo by identity: datetime.UTC, not an equal offset of another class.
        return (datetime, value.isoformat(), type(value.tzinfo), value.tzinfo is UTC)
    return (type(value), repr(value))


def refusal(exc: EnvelopeError) -> tuple[Any, ...]:
    return (type(exc), exc.code, exc.message, state(exc.details), state(exc.raw))


def decoded(reader: Callable[..., Any], data: Any, **options: Any) -> tuple[Any, ...]:
    """("ok", the envelope's state, its bytes) or ("refused", ...); nothing else may escape."""
    try:
        envelope = reader(data, **options)
    except EnvelopeError as exc:
        return ("refused", *refusal(exc))
    return ("ok", state(envelope), encode_full(envelope, max_size=None))


def forms(data: bytes) -> list[Any]:
    """The input as each type decode takes (str only where the bytes are UTF-8)."""
    found: list[Any] = [data, bytearray(data), memoryview(data)]
    try:
        found.append(data.decode())
    except UnicodeDecodeError:
        found.append(data.decode("utf-8", "surrogateescape"))
    return found


def assert_same_decoding(data: bytes, **options: Any) -> None:
    """Both paths, on each form of ``data``, say the same; bytes say what other buffers say."""
    options = {"message_id": FALLBACK_ID, "received_at": RECEIVED_AT} | options
    said = []
    for form in forms(data):
        fast = decoded(decode, form, **options)
        full = decoded(decode_full, form, **options)
        assert fast == full, f"{type(form).__name__} input decodes differently"
        if fast[0] == "ok":
            envelope = decode(form, **options)
            assert encode(envelope, max_size=None) == fast[2]
        said.append(fast)
    # bytes take a shortcut past the writable test's call; bytearray and memoryview do not.
    # (str is left out: its size is counted in characters.)
    assert said[1] == said[0]
    assert said[2] == said[0]


def encoded(writer: Callable[..., bytes], envelope: Any, max_size: int | None) -> tuple[Any, ...]:
    try:
        return ("ok", writer(envelope, max_size=max_size))
    except EnvelopeError as exc:
        return ("refused", *refusal(exc))


# -- the fast path is the path taken --------------------------------------------------------


def _common_envelopes() -> list[Any]:
    request = RequestEnvelope(
        sender_id="client-1",
        receiver_id="worker",
        payload=RequestPayload(action="greet", parameters={"who": "ann"}),
        metadata=Metadata(trace="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
    )
    return [
        request,
        request.response({"greeting": "hi"}, sender_id="worker-1", metadata={"usage": {"n": 1}}),
        request.error(ErrorCode.TIMEOUT, "late", sender_id="worker-1"),
        EventEnvelope.model_validate(
            {
                "sender_id": "a",
                "receiver_id": "broadcast",
                "payload": {"event_name": "heartbeat", "event_data": {"n": 1}},
            }
        ),
    ]


@pytest.mark.parametrize("envelope", _common_envelopes(), ids=lambda e: e.message_type)
def test_a_common_envelope_never_reaches_the_full_paths(
    envelope: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What agentbus writes is read and written by the fast path: the full one is not called."""
    data = encode_full(envelope)

    def refused(*args: object) -> None:
        raise AssertionError("the full path was taken")

    monkeypatch.setattr(_codec, "_validated", refused)
    monkeypatch.setattr(_codec, "wire_dict", refused)

    assert encode(envelope) == data
    assert decode(data) == envelope


@pytest.mark.parametrize(
    "body",
    [
        {"protocol_version": "1.4"},  # a newer minor: read, by the full path
        {"protocol_version": 1.1},
        {"message_id": None},  # left out: decode stands in for it
        {"timestamp": None},
        {"message_type": ["request"]},
    ],
    ids=["minor", "version-number", "no-message-id", "no-timestamp", "type-list"],
)
def test_an_unusual_envelope_is_left_to_the_full_path(body: dict[str, Any]) -> None:
    """Only the common case is taken; the full path decides the rest."""
    obj = orjson.loads(encode_full(_common_envelopes()[0]))
    for key, value in body.items():
        if value is None:
            del obj[key]
        else:
            obj[key] = value

    assert _fast.validator_for(obj) is None


def test_the_models_have_only_what_the_fast_dump_knows() -> None:
    """envelope_dict drops only metadata's None fields and nests only metadata and payload."""
    for cls, payload_class in _fast._PAYLOADS.items():
        nested = {
            name
            for name, info in cls.model_fields.items()
            if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
        }
        assert nested == {"metadata", "payload"}
        assert cls.model_fields["payload"].annotation is payload_class
        assert cls.model_fields["metadata"].annotation is Metadata
        for model in (cls, payload_class):
            assert all(info.exclude_if is None for info in model.model_fields.values())
    # Metadata drops each of its fields exactly when it is None, and holds only those.
    for name, info in Metadata.model_fields.items():
        assert info.exclude_if is not None
        assert info.exclude_if(None)
        assert not info.exclude_if(Metadata.model_validate({name: "2024-05-01T12:30:00Z"}))
    assert Metadata().__dict__ == dict.fromkeys(Metadata.model_fields)


# -- the fuzz corpus ------------------------------------------------------------------------


def _corpus() -> list[Path]:
    return sorted(path for path in CORPUS.rglob("*") if path.is_file())


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: f"{p.parent.name}/{p.name[:24]}")
def test_corpus_input_decodes_the_same_on_both_paths(path: Path) -> None:
    """Every seed and finding of both fuzz targets: the same envelope or the same refusal."""
    data = path.read_bytes()

    assert_same_decoding(data)
    assert_same_decoding(data, max_size=None)
    assert_same_decoding(data, max_size=max(len(data) - 1, 0))


def test_the_corpus_holds_envelopes_of_each_kind_for_the_fast_path() -> None:
    """The corpus comparison means something: it feeds the fast path every kind."""
    taken: set[str] = set()
    for path in _corpus():
        try:
            obj = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError:
            continue
        if _fast.validator_for(obj) is not None:
            taken.add(obj["message_type"])

    assert taken == set(KINDS)


# -- hypothesis: envelopes, valid and near-valid --------------------------------------------

ID_CHARACTERS = string.ascii_letters + string.digits + "_-"
texts = st.text(max_size=10)
ids = st.text(ID_CHARACTERS, min_size=1, max_size=12) | st.just("Z" * 128)
message_ids = st.uuids().map(str) | st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=16
)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
json_objects = st.dictionaries(texts, json_values, max_size=3)
offsets = st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23))
datetimes = st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.none() | st.just(UTC) | offsets.map(timezone),
)


@st.composite
def wire_times(draw: st.DrawFn) -> Any:
    """A time as agentbus, JavaScript or Go writes it; one in five as a careless client does."""
    moment = draw(datetimes)
    utc = moment.replace(tzinfo=None).isoformat(timespec="seconds")
    digits = draw(st.sampled_from(["", ".5", ".123", ".123456", ".123456789", ".1234567"]))
    if draw(st.integers(0, 4)):
        return draw(
            st.sampled_from([f"{utc}{digits}Z", f"{utc}{digits}+00:00", moment.isoformat()])
        )
    odd = [utc.replace("T", " ") + "Z", utc[:16] + "Z", utc[:10], "2024-02-30T00:00:00Z"]
    odd += ["2024-05-01T24:00:00Z", "0001-01-01T00:00:00+05:00", 1714566600, 1714566600.5]
    return draw(st.sampled_from(odd))


PAYLOADS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "request": {"action": ids, "parameters": json_objects},
    "response": {
        "status": st.sampled_from([status.value for status in ResponseStatus]),
        "result": json_values,
        "error": st.none() | json_objects,
    },
    "event": {"event_name": ids, "event_data": json_objects},
    "error": {
        "code": st.text(min_size=1, max_size=128),
        "message": texts,
        "details": json_objects,
    },
}
REQUIRED = {"request": ("action",), "event": ("event_name",), "error": ("code", "message")}
METADATA = {
    "correlation_id": st.none() | message_ids,
    "deadline": st.none() | wire_times(),
    "trace": st.none() | texts,
    "usage": st.dictionaries(st.sampled_from(["tokens_in", "usd"]), st.floats(0, 10)),
    "notify_start": st.booleans(),
}


def free_keys(known: object) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(texts.filter(lambda key: key not in known), json_values, max_size=2)


@st.composite
def envelope_objects(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON object of a valid envelope, unknown fields at every level."""
    kind = draw(st.sampled_from(KINDS))
    fields = PAYLOADS[kind]
    payload = draw(
        st.fixed_dictionaries(
            {name: fields[name] for name in REQUIRED.get(kind, ())},
            optional={
                name: value for name, value in fields.items() if name not in REQUIRED.get(kind, ())
            },
        )
    )
    payload |= draw(free_keys(fields))
    envelope = draw(
        st.fixed_dictionaries(
            {
                "protocol_version": st.sampled_from(["1.0", "1.1", "1.1", "1.1", "1.7"]),
                "sender_id": ids,
                "receiver_id": ids,
                "message_type": st.just(kind),
            },
            optional={
                "message_id": message_ids,
                "timestamp": wire_times(),
                "metadata": st.fixed_dictionaries({}, optional=METADATA),
            },
        )
    )
    envelope["payload"] = payload
    if draw(st.integers(0, 9)):  # mostly there, as agentbus writes them; else stood in for
        envelope.setdefault("message_id", draw(message_ids))
        envelope.setdefault("timestamp", draw(wire_times()))
    if "metadata" in envelope:
        envelope["metadata"] |= draw(free_keys(METADATA))
    return envelope | draw(free_keys(envelope))


# Values a near-valid envelope gets in place of a field's.
ODD_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    1.5,
    2**63,
    2**64,  # json writes it; orjson reads it as a float
    -(2**63) - 1,
    float("nan"),  # json writes NaN, Infinity: orjson refuses them
    float("inf"),
    "",
    " ",
    "Z" * 129,
    "!" * 255,
    "!" * 256,
    "a.b",
    "a b",
    "caf\u00e9",
    "\u0661\u0662",  # Arabic-Indic digits: not [0-9]
    "\uff21\uff22",  # fullwidth letters: not [A-Za-z]
    "\u0000",
    "line\n",
    "\U0001f600",
    [],
    {},
    [1],
    {"action": "x"},
    "1.0",
    "1.1",
    "1.2",
    "01.0",
    "2.0",
    "1",
    "1.0.0",
    "1.1234567890",
    "request",
    "response",
    "event",
    "error",
    "success",
    "SUCCESS",
    "in_progress",
    "2024-05-01T12:30:00Z",
    "2024-05-01T12:30:00",
    "2024-05-01T12:30:00+05:00",
    "2024-05-01T12:30:00.123456789Z",
    "2024-02-30T00:00:00Z",
    1714566600,
]
FIELD_NAMES = [
    "protocol_version",
    "message_id",
    "timestamp",
    "sender_id",
    "receiver_id",
    "message_type",
    "payload",
    "metadata",
    "action",
    "parameters",
    "status",
    "result",
    "error",
    "event_name",
    "event_data",
    "code",
    "message",
    "details",
    "correlation_id",
    "deadline",
    "trace",
]
DUPLICATES = ["a.b", "caf\u00e9", "request", "error", "1.1", "2.0", {}, [1], None]
DEEP = "__deep__"
# Many brackets, nested twice: over the writable test's count, and over its first chunk.
BRACKETS = [[[0]] * 100, [[i] for i in range(3000)], "[" * 300, "x" * 9000]


@st.composite
def mutated(draw: st.DrawFn, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with a few fields dropped, retyped, resized or added, at any level."""
    for _ in range(draw(st.integers(1, 3))):
        targets = [obj] + [
            obj[key] for key in ("payload", "metadata") if isinstance(obj.get(key), dict)
        ]
        target = draw(st.sampled_from(targets))
        action = draw(st.sampled_from(["drop", "odd", "add", "deep", "brackets"]))
        if action == "drop" and target:
            del target[draw(st.sampled_from(sorted(target)))]
        elif action == "odd":
            odd = copy.deepcopy(draw(st.sampled_from(ODD_VALUES)))  # it may be mutated next
            target[draw(st.sampled_from(FIELD_NAMES))] = odd
        elif action == "add":
            target |= draw(free_keys(()))
        elif action == "deep":
            target[draw(st.sampled_from([*FIELD_NAMES, "x_deep"]))] = DEEP
        else:
            target[draw(st.sampled_from(["parameters", "result", "x_many"]))] = draw(
                st.sampled_from(BRACKETS)
            )
    return obj


@st.composite
def written(draw: st.DrawFn, obj: dict[str, Any], twisted: bool = True) -> bytes:
    """``obj`` as JSON text the way some client might write it; if ``twisted``, maybe bent."""
    style = draw(st.sampled_from(["compact", "ascii", "indent"]))
    if style == "compact":
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    elif style == "ascii":
        text = json.dumps(obj)
    else:
        text = json.dumps(obj, indent=2, ensure_ascii=False)
    depth = draw(st.sampled_from([3, 254, 255, 300]))
    text = text.replace(f'"{DEEP}"', "[" * depth + "0" + "]" * depth)
    twists = [None] * 7 + ["first", "last", "bom", "trailing", "surrogate", "not-utf-8"]
    twist = draw(st.sampled_from(twists)) if twisted else None
    key = draw(st.sampled_from(["sender_id", "message_type", "protocol_version", "payload"]))
    duplicate = f'"{key}":{json.dumps(draw(st.sampled_from(DUPLICATES)))}'
    if twist == "first" and text.startswith("{") and len(text) > 2:
        text = "{" + duplicate + "," + text[1:]  # the field's own value comes later and wins
    elif twist == "last" and text.endswith("}") and len(text) > 2:
        text = text[:-1] + "," + duplicate + "}"  # the duplicate wins
    elif twist == "bom":
        text = "\ufeff" + text
    elif twist == "trailing":
        text += " x"
    elif twist == "surrogate":
        text = text.replace('"sender_id":', '"sender_id\\ud800":', 1)
    data = text.encode()
    if twist == "not-utf-8":
        data = data.replace(b'"payload"', b'"pay\xffload"', 1)
    return data


@examples(150)
@given(envelope_objects().flatmap(lambda obj: written(obj, twisted=False)))
def test_valid_envelopes_decode_the_same_on_both_paths(data: bytes) -> None:
    """Valid envelopes, as clients write them: the same envelope from either path."""
    assert_same_decoding(data)


@examples(300)
@given(envelope_objects().flatmap(mutated).flatmap(written))
def test_near_valid_envelopes_decode_or_fail_the_same_on_both_paths(data: bytes) -> None:
    """Near-valid envelopes: the same envelope or the same error (code, message, details)."""
    assert_same_decoding(data)


@examples(100)
@given(
    envelope_objects().flatmap(written),
    st.sampled_from(["message-7", "has space", "\u00e9t\u00e9", "!" * 256]),
    st.sampled_from(
        [
            RECEIVED_AT,
            datetime(2024, 5, 1, 12, 0),
            datetime(2024, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=5))),
            datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))),
        ]
    ),
    st.sampled_from([None, DEFAULT_MAX_SIZE, 64, 0]),
)
def test_stand_ins_and_size_caps_are_the_same_on_both_paths(
    data: bytes, message_id: str, received_at: datetime, max_size: int | None
) -> None:
    """What decode stands in for a missing id or time, and its size cap, whichever path."""
    assert_same_decoding(data, message_id=message_id, received_at=received_at, max_size=max_size)


# -- hypothesis: encode ---------------------------------------------------------------------


class Report(BaseModel):
    title: str
    at: datetime


class Colour(Enum):
    RED = "red"


Point = namedtuple("Point", "x y")

# Results a handler may return: JSON, and Python values orjson or the codec writes or refuses.
results = json_values | st.sampled_from(
    [
        Report(title="t", at=RECEIVED_AT),
        [Report(title="t", at=RECEIVED_AT), Metadata(trace="x")],
        (1, "two"),
        Point(1, 2),
        RECEIVED_AT,
        datetime(2024, 5, 1, 12, 0),
        ResponseStatus.FAILURE,
        Colour.RED,
        {1, 2},  # not serializable: EnvelopeError
        2**64,  # over orjson's range: EnvelopeError
        {"deep": "x" * 2000},
    ]
)


class TaggedRequest(RequestEnvelope):
    """A subclass: not one of the four classes exactly, so not the fast path's."""


@st.composite
def envelope_models(draw: st.DrawFn) -> Any:
    """Envelopes as Python code builds them: decoded, answered, constructed, subclassed."""
    obj = draw(envelope_objects())
    obj["protocol_version"] = draw(st.sampled_from(["1.0", "1.1"]))
    obj.setdefault("message_id", "m-1")
    obj.setdefault("timestamp", "2024-05-01T12:30:00Z")
    try:
        envelope = decode_full(orjson.dumps(obj), max_size=None)
    except EnvelopeError:
        envelope = _common_envelopes()[0]
    how = draw(st.sampled_from(["decoded", "response", "error", "construct", "subclass"]))
    if how == "response" and isinstance(envelope, RequestEnvelope):
        extra = draw(st.none() | st.dictionaries(st.sampled_from(["usage", "hop"]), results))
        return envelope.response(draw(results), sender_id="w-1", metadata=extra)
    if how == "error" and isinstance(envelope, RequestEnvelope):
        return envelope.error(
            ErrorCode.TIMEOUT, "late", sender_id="w-1", details={"r": draw(results)}
        )
    if how == "construct":
        # model_construct trusts its input: metadata as a plain dict is written as it is.
        return RequestEnvelope.model_construct(
            sender_id="a",
            receiver_id="b",
            payload=RequestPayload(action="x", parameters={"r": draw(results)}),
            metadata=draw(st.sampled_from([{"trace": "t", "k": None}, Metadata(trace="t")])),
        )
    if how == "subclass":
        return TaggedRequest(sender_id="a", receiver_id="b", payload=RequestPayload(action="x"))
    return envelope


@examples(250)
@given(envelope_models(), st.sampled_from([None, DEFAULT_MAX_SIZE, 300]))
def test_envelopes_encode_the_same_on_both_paths(envelope: Any, max_size: int | None) -> None:
    """The same bytes from either path, or the same error (unserializable, over the cap)."""
    fast = encoded(encode, envelope, max_size)
    full = encoded(encode_full, envelope, max_size)

    assert fast == full
    if fast[0] == "ok" and max_size is None:
        assert fast[1] == orjson.dumps(wire_dict(envelope), default=_codec.unserializable,
                                       option=orjson.OPT_UTC_Z)  # fmt: skip


# -- the reply builders ---------------------------------------------------------------------


def _old_error(request: RequestEnvelope, code: Any, message: Any, details: Any) -> ErrorEnvelope:
    """RequestEnvelope.error as it was: the three models built one by one."""
    return ErrorEnvelope(
        sender_id="w-1",
        receiver_id=request.sender_id,
        payload=ErrorPayload(code=str(code), message=message, details=details or {}),
        metadata=Metadata(correlation_id=request.message_id, trace=request.metadata.trace),
    )


def _without_ids(envelope: Any) -> Any:
    """The envelope's state but its fresh id and time (each build makes its own)."""
    assert type(envelope.message_id) is str
    assert envelope.timestamp.tzinfo is UTC
    kind, fields, *rest = state(envelope)
    return kind, [field for field in fields if field[0] not in {"message_id", "timestamp"}], rest


@examples(150)
@given(
    st.sampled_from(list(ErrorCode)) | st.text(max_size=130),
    texts | st.sampled_from([None, 3]),
    st.none() | json_objects | st.sampled_from([{}, {1: 2}]),
    st.none() | texts,
)
def test_error_replies_are_the_envelopes_they_were(
    code: Any, message: Any, details: Any, trace: str | None
) -> None:
    """RequestEnvelope.error in one validation builds what the three models built, or fails so."""
    request = RequestEnvelope(
        sender_id="c-1",
        receiver_id="w",
        payload=RequestPayload(action="x"),
        metadata=Metadata(trace=trace),
    )
    try:
        expected = _without_ids(_old_error(request, code, message, details))
    except ValidationError:
        with pytest.raises(ValidationError):
            request.error(code, message, sender_id="w-1", details=details)
        return

    assert _without_ids(request.error(code, message, sender_id="w-1", details=details)) == expected


# -- the writable test's bracket count ------------------------------------------------------


@examples(200)
@given(
    st.lists(st.sampled_from(["[", "{", "]", "x", "\u00e9", '"a":1,']), max_size=40),
    st.sampled_from([0, 1, 8190, 8192, 20_000]),
    st.integers(0, 300),
    st.sampled_from([bytes, bytearray, str]),
)
def test_the_bracket_count_stops_early_and_says_what_a_full_count_says(
    pieces: list[str], padding: int, limit: int, kind: type
) -> None:
    """Counted a chunk at a time, the answer is the whole count's, on either side of a chunk."""
    text = "".join(pieces) + "x" * padding + "".join(reversed(pieces)) + "[" * (limit % 7)
    body: Any = text if kind is str else kind(text.encode())
    whole = text.count("[") + text.count("{")

    assert _codec._more_brackets_than(limit, body) is (whole > limit)
