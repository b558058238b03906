"""The envelope codec's fast path against its full path, in process, per envelope.

PYTHONPATH=src .venv/bin/python bench/envelope_paths.py [--alternatives] [--rounds N]

For a request and a response as the hot path carries them (small parameters and result,
a trace, a correlation id), and a request with 64 KB of parameters: ``decode`` against
``decode_full`` and ``encode`` against ``encode_full`` (envelopes/_fast.py), with the ratio
full / fast. ``--alternatives`` adds the ways of making a request envelope that were
measured for the fast path and not taken (why: envelopes/_fast.py's docstring).

Each figure is the best per-call time of many batches of thread CPU time (not wall time:
a shared machine's other processes do not count), so figures compare within one run; run
from another checkout (one without ``decode_full``), both columns are its public calls.
"""

from __future__ import annotations

import argparse
import gc
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import TypeAdapter

from agentbus.envelopes import (
    Envelope,
    Metadata,
    RequestEnvelope,
    RequestPayload,
    ResponseEnvelope,
    _codec,
    decode,
    encode,
)

full_decode: Callable[..., Any] = getattr(_codec, "decode_full", decode)
full_encode: Callable[..., bytes] = getattr(_codec, "encode_full", encode)
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def per_call(call: Callable[[], object], rounds: int, batch: int) -> float:
    """Best microseconds per call over ``rounds`` batches of ``batch`` calls (thread CPU)."""
    return best_of(call, call, rounds, batch)[0]


def best_of(
    first: Callable[[], object], second: Callable[[], object], rounds: int, batch: int
) -> tuple[float, float]:
    """Best microseconds per call of each, their batches taken in turn (thread CPU time)."""
    best = [float("inf"), float("inf")]
    gc.collect()
    gc.disable()  # a collection lands on whichever batch it likes
    try:
        for _ in range(rounds):
            for which, call in enumerate((first, second)):
                start = time.thread_time_ns()
                for _ in range(batch):
                    call()
                best[which] = min(best[which], time.thread_time_ns() - start)
    finally:
        gc.enable()
    return best[0] / batch / 1000, best[1] / batch / 1000


def envelopes() -> dict[str, Envelope]:
    request = RequestEnvelope(
        sender_id="bench-client",
        receiver_id="worker",
        payload=RequestPayload(action="process", parameters={"who": "ann", "n": 3}),
        metadata=Metadata(trace=TRACE),
    )
    records = [{"id": i, "name": f"item-{i:07d}", "score": i / 7, "ok": True} for i in range(900)]
    return {
        "request": request,
        "response": request.response({"greeting": "hello ann"}, sender_id="worker-1"),
        "request 64 KB": request.model_copy(
            update={"payload": RequestPayload(action="process", parameters={"records": records})}
        ),
    }


def compare(rounds: int) -> None:
    print(f"{'envelope':14} {'call':7} {'bytes':>6} {'full us':>9} {'fast us':>9} {'full/fast':>9}")
    for name, envelope in envelopes().items():
        data = full_encode(envelope, max_size=None)
        batch = 50 if len(data) < 4096 else 2
        pairs = {
            "decode": (lambda d=data: full_decode(d), lambda d=data: decode(d)),
            "encode": (lambda e=envelope: full_encode(e), lambda e=envelope: encode(e)),
        }
        for call, (full, fast) in pairs.items():
            # Batch by batch in turn, so a slow spell of the machine weighs on both alike.
            full_us, fast_us = best_of(full, fast, rounds * 50, batch)
            print(
                f"{name:14} {call:7} {len(data):6} {full_us:9.2f} {fast_us:9.2f} "
                f"{full_us / fast_us:9.2f}"
            )


# -- the ways not taken ---------------------------------------------------------------------

_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_MESSAGE_ID = re.compile(r"[\x21-\x7e]{1,255}")
_TIME = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?)Z")
_set = object.__setattr__


def _new(cls: type[Any], values: dict[str, Any], given: set[str]) -> Any:
    model = cls.__new__(cls)
    _set(model, "__dict__", values)
    _set(model, "__pydantic_extra__", {})
    _set(model, "__pydantic_fields_set__", given)
    _set(model, "__pydantic_private__", None)
    return model


def hand_built(obj: dict[str, Any]) -> RequestEnvelope | None:
    """The best case of checking by hand and building the instances: a request, no extras."""
    metadata, payload = obj["metadata"], obj["payload"]
    match = _TIME.fullmatch(obj["timestamp"])
    checked = (
        len(obj) == 8
        and _ID.fullmatch(obj["sender_id"])
        and _ID.fullmatch(obj["receiver_id"])
        and _ID.fullmatch(payload["action"])
        and _MESSAGE_ID.fullmatch(obj["message_id"])
        and match
        and type(payload.get("parameters")) is dict
        and metadata.keys() <= {"trace"}
    )
    if not checked or match is None:
        return None
    values = {"correlation_id": None, "deadline": None, "trace": metadata.get("trace")}
    return _new(  # type: ignore[no-any-return]
        RequestEnvelope,
        {
            "protocol_version": obj["protocol_version"],
            "message_id": obj["message_id"],
            "timestamp": datetime.fromisoformat(match.group(1)).replace(tzinfo=UTC),
            "sender_id": obj["sender_id"],
            "receiver_id": obj["receiver_id"],
            "metadata": _new(Metadata, values, set(metadata)),
            "message_type": "request",
            "payload": _new(RequestPayload, dict(payload), set(payload)),
        },
        set(obj),
    )


def alternatives(rounds: int) -> None:
    request = envelopes()["request"]
    data = encode(request)
    obj = orjson.loads(data)
    assert hand_built(obj) == request
    validator = RequestEnvelope.__pydantic_validator__
    union = TypeAdapter(Envelope)
    payload = obj["payload"]
    ways: dict[str, Callable[[], object]] = {
        "orjson.loads": lambda: orjson.loads(data),
        "the model's validator (the fast path's)": lambda: validator.validate_python(obj),
        "the union's validator (TypeAdapter)": lambda: union.validate_python(obj),
        "checked and built by hand (best case)": lambda: hand_built(obj),
        "model_construct of the payload alone": lambda: RequestPayload.model_construct(**payload),
        "validate_json from the bytes (no loads)": lambda: validator.validate_json(data),
        "decode (all of it)": lambda: decode(data),
    }
    best = dict.fromkeys(ways, float("inf"))
    for _ in range(rounds):
        for name, way in ways.items():
            best[name] = min(best[name], per_call(way, 20, 50))
    print(f"\nmaking a request envelope ({len(data)} bytes), us per call:")
    for name, us in best.items():
        print(f"  {name:42} {us:6.2f}")
    print(f"  (the response built by request.response(): {response_us(request, rounds):.2f})")


def response_us(request: RequestEnvelope, rounds: int) -> float:
    def build() -> ResponseEnvelope:
        return request.response({"greeting": "hello ann"}, sender_id="worker-1")

    return per_call(build, rounds * 20, 50)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default 10)")
    parser.add_argument("--alternatives", action="store_true", help="also the ways not taken")
    args = parser.parse_args()
    compare(args.rounds)
    if args.alternatives:
        alternatives(args.rounds)


if __name__ == "__main__":
    main()
