"""Envelope codec cost for suite.py: encode and decode of one request at 1 KB, 64 KB and 1 MB.

The parameters are a list of small records (ints, floats, strings, a list, a bool) sized to
the payload; next to agentbus's ``encode``/``decode`` (pydantic models, orjson, checks), the
bare ``orjson.dumps``/``orjson.loads`` of the same fields, what a hand-rolled client pays.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import orjson

from _harness import summary
from agentbus.envelopes import RequestEnvelope, RequestPayload, decode, encode

SIZES = (1_000, 64_000, 1_000_000)


def parameters_of(size: int) -> dict[str, Any]:
    """Parameters whose JSON is about ``size`` bytes."""

    def record(i: int) -> dict[str, Any]:
        return {"id": i, "name": f"item-{i:07d}", "score": i / 7, "tags": ["a", "bc"], "ok": True}

    per_record = len(orjson.dumps(record(10**6))) + 1
    count = max((size - len(b'{"records":[]}')) // per_record, 1)
    return {"records": [record(10**6 + i) for i in range(count)]}


def timed(call: Callable[[], object], iterations: int) -> dict[str, float]:
    for _ in range(max(iterations // 10, 3)):
        call()
    gc.collect()
    samples: list[int] = []
    for _ in range(iterations):
        start = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - start)
    return summary(samples)


def codec_case(size: int, iterations: int) -> dict[str, Any]:
    payload = RequestPayload(action="process", parameters=parameters_of(size))
    envelope = RequestEnvelope(sender_id="bench-client", receiver_id="worker", payload=payload)
    data = encode(envelope, max_size=None)
    fields = orjson.loads(data)
    runs = {
        "encode": timed(lambda: encode(envelope, max_size=None), iterations),
        "decode": timed(lambda: decode(data, max_size=None), iterations),
        "orjson_dumps": timed(lambda: orjson.dumps(fields), iterations),
        "orjson_loads": timed(lambda: orjson.loads(data), iterations),
    }
    out: dict[str, Any] = {"payload_bytes": size, "envelope_bytes": len(data)}
    out |= {"iterations": iterations}
    for name, stats in runs.items():
        out[f"{name}_us"] = stats["p50_us"]
        out[f"{name}_mean_us"] = stats["mean_us"]
    return out


def run_codec(quick: bool) -> list[dict[str, Any]]:
    budget = 5_000_000 if quick else 50_000_000  # bytes through each call, per size
    return [codec_case(size, min(max(budget // size, 20), 50_000)) for size in SIZES]
