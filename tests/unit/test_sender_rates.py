"""Per-sender rate limits: the token bucket, and rate_limited on the in-memory bus."""

from __future__ import annotations

import pytest

from agentbus import Metrics, RemoteError, RequestEnvelope, Settings
from agentbus.envelopes import PROTOCOL_VERSION, ErrorCode
from agentbus.security import SenderRates
from agentbus.testing import MemoryBroker, MemoryBus


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_sender_gets_its_burst_then_its_rate_and_others_are_untouched() -> None:
    """burst at once, then one per 1/rate seconds; another sender has its own bucket."""
    clock = Clock()
    rates = SenderRates(rate=2.0, burst=3, clock=clock)
    assert [rates.allow("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert rates.allow("a") == pytest.approx(0.5)
    assert rates.allow("b") == 0.0, "b is not starved by a"
    clock.now += 0.5
    assert rates.allow("a") == 0.0
    assert rates.allow("a") > 0.0
    clock.now += 10
    assert [rates.allow("a") for _ in range(3)] == [0.0, 0.0, 0.0], "refilled to the burst"


def test_the_quietest_sender_is_forgotten_past_the_cap() -> None:
    """At most max_senders buckets; the one dropped starts afresh with a full burst."""
    clock = Clock()
    rates = SenderRates(rate=1.0, burst=1, clock=clock, max_senders=2)
    assert rates.allow("a") == 0.0
    assert rates.allow("b") == 0.0
    assert rates.allow("c") == 0.0  # a is dropped
    assert rates.allow("a") == 0.0
    assert rates.allow("c") > 0.0


def test_rate_limited_is_a_minor_addition_to_the_contract() -> None:
    """The code is new in 1.1 (and the contract has moved on since, by minors)."""
    assert ErrorCode.RATE_LIMITED == "rate_limited"
    assert tuple(int(part) for part in PROTOCOL_VERSION.split(".")) >= (1, 1)


async def test_a_sender_over_its_rate_is_answered_rate_limited_and_counted() -> None:
    """Burst 2: the third request is not run; it is answered, counted, in the metrics."""
    broker = MemoryBroker()
    ran: list[str] = []

    async def handler(request: RequestEnvelope) -> str:
        ran.append(request.message_id)
        return "ok"

    metrics = Metrics()
    limited = Settings(rate_limit=0.01, rate_burst=2)
    async with (
        MemoryBus(broker, limited, agent_id="svc-1") as server,
        MemoryBus(broker, agent_id="greedy-1") as greedy,
        MemoryBus(broker, agent_id="fair-1") as fair,
    ):
        metrics.attach(server)
        await server.serve(handler, service="svc")
        served = [await greedy.request("svc", "go", timeout=5) for _ in range(2)]
        with pytest.raises(RemoteError) as over:
            await greedy.request("svc", "go", timeout=5)
        other = await fair.request("svc", "go", timeout=5)

    assert [reply.result for reply in served] == ["ok", "ok"]
    assert over.value.code == "rate_limited"
    assert over.value.details["retry_after"] > 0
    assert other.result == "ok", "another sender is served"
    assert len(ran) == 3
    assert server.stats.rate_limited == 1
    assert server.stats.consumed_by[("request", "rate_limited")] == 1
    labels = {"agent_id": "svc-1"}
    assert metrics.registry.get_sample_value("agentbus_rate_limited_total", labels) == 1
