"""Fuzz ``agentbus.envelopes.decode``: coverage-guided (atheris), JSON-aware mutations.

Properties, for every input:

- ``decode`` returns an envelope or raises an ``EnvelopeError`` (one of its three codes);
  no other exception escapes;
- it takes less than ``--slow-ms`` (50 ms; a slow input is timed three times, the best
  counts);
- an envelope it returns re-encodes, decodes to an equal envelope, and encodes to the
  same bytes again;
- the input read as ``str``, ``bytearray`` and ``memoryview`` gives the same outcome as
  as ``bytes`` (invalid UTF-8 read as ``str`` with lone surrogates: ``EnvelopeError``).

Run (see fuzz/README.md)::

    .venv/bin/python fuzz/fuzz_decode.py fuzz/work/decode fuzz/corpus/decode \\
        -max_total_time=600 -max_len=8192 -timeout=10 -rss_limit_mb=1024
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from typing import Any

import _fuzzkit

with _fuzzkit.instrumented():
    from agentbus.envelopes import EnvelopeError, decode, encode

TARGET = "decode"
CODES = frozenset({"invalid_envelope", "unsupported_version", "payload_too_large"})
FALLBACK_ID = "fuzz-fallback-id"
RECEIVED_AT = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
KEYS = [
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
    "notify_start",
    "x_unknown",
]

args, libfuzzer_args = _fuzzkit.parse_args(__doc__ or "", TARGET)
findings = _fuzzkit.Findings(TARGET, args.findings, stop=args.stop)
slow_seconds = args.slow_ms / 1000


def outcome(data: Any) -> tuple[str, Any]:
    """("ok", envelope) or ("refused", code); any other exception propagates."""
    try:
        envelope = decode(data, message_id=FALLBACK_ID, received_at=RECEIVED_AT)
    except EnvelopeError as exc:
        if exc.code not in CODES:
            raise _fuzzkit.PropertyViolation(
                f"unexpected EnvelopeError code {exc.code}", _fuzzkit.safe_repr(exc)
            ) from exc
        return "refused", exc.code
    return "ok", envelope


def timed(data: bytes) -> tuple[tuple[str, Any], float]:
    started = time.perf_counter()
    result = outcome(data)
    return result, time.perf_counter() - started


def check(data: bytes) -> None:
    result, seconds = timed(data)
    if seconds > slow_seconds:
        # One slow run may be the garbage collector: the best of three counts.
        best = min(seconds, *(timed(data)[1] for _ in range(2)))
        if best > slow_seconds:
            raise _fuzzkit.PropertyViolation(
                "slow decode", f"{best * 1000:.1f} ms for {len(data)} bytes"
            )
    kind, value = result
    if kind == "ok":
        check_round_trip(value)
    check_other_types(data, result)


def check_round_trip(envelope: Any) -> None:
    try:
        wire = encode(envelope, max_size=None)
    except Exception as exc:
        raise _fuzzkit.PropertyViolation(
            "decoded envelope does not encode",
            f"{type(exc).__name__}: {exc}\n{_fuzzkit.safe_repr(envelope)}",
        ) from exc
    again = decode(wire, max_size=None)
    if again != envelope:
        raise _fuzzkit.PropertyViolation(
            "round trip changes the envelope",
            f"first:  {_fuzzkit.safe_repr(envelope)}\nsecond: {_fuzzkit.safe_repr(again)}",
        )
    if encode(again, max_size=None) != wire:
        raise _fuzzkit.PropertyViolation("re-encoding is not stable", _fuzzkit.safe_repr(wire))


def check_other_types(data: bytes, expected: tuple[str, Any]) -> None:
    try:
        text = data.decode()
    except UnicodeDecodeError:
        kind, _ = outcome(data.decode("utf-8", "surrogateescape"))
        if kind != "refused":
            raise _fuzzkit.PropertyViolation("str with lone surrogates accepted") from None
        return
    others = (("str", text), ("bytearray", bytearray(data)), ("memoryview", memoryview(data)))
    for name, other in others:
        got = outcome(other)
        if got != expected:
            raise _fuzzkit.PropertyViolation(
                f"{name} input decodes differently from bytes",
                f"bytes: {_fuzzkit.safe_repr(expected)}\n{name}: {_fuzzkit.safe_repr(got)}",
            )


def test_one_input(data: bytes) -> None:
    _fuzzkit.run_checked(findings, data, check)


MUTATOR = _fuzzkit.JsonMutator(KEYS)

if __name__ == "__main__":
    _fuzzkit.main(args, libfuzzer_args, findings, test_one_input, MUTATOR)
    sys.exit(0)
