"""Recovery after the broker force-closes every connection."""

from __future__ import annotations

import asyncio
from typing import Any

from helpers import BusFactory, force_close

from agentbus import RequestEnvelope
from agentbus.envelopes import EventEnvelope
from support.waiting import wait_until


async def test_consumers_come_back_after_forced_close(
    make_bus: BusFactory, exchange_name: str
) -> None:
    """After the broker closes all our connections, serving, replies and events work again."""
    served: list[str] = []
    events: list[EventEnvelope] = []

    async def handler(request: RequestEnvelope) -> dict[str, Any]:
        served.append(request.message_id)
        return {"n": request.payload.parameters["n"]}

    async def on_event(event: EventEnvelope) -> None:
        events.append(event)

    server = await make_bus(f"srv-{exchange_name}", reconnect_interval=0.2)
    await server.serve(handler, service="svc")
    client = await make_bus(f"cli-{exchange_name}", reconnect_interval=0.2)
    await client.subscribe("broadcast.event.ping", on_event)
    assert (await client.request("svc", "before", {"n": 0}, timeout=10)).result == {"n": 0}

    closed = await force_close(f"agentbus:srv-{exchange_name}")
    closed += await force_close(f"agentbus:cli-{exchange_name}")

    assert closed == 2
    # The next requests wait for the reconnect and go through; none is lost.
    replies = await asyncio.gather(
        *(client.request("svc", "after", {"n": n}, timeout=20) for n in range(1, 21))
    )
    assert [reply.result["n"] for reply in replies] == list(range(1, 21))
    await server.emit("ping", {"after": "reconnect"})
    await wait_until(lambda: len(events) == 1, timeout=10)
    assert len(set(served)) == len(served) == 21


async def test_requests_in_flight_during_forced_close_each_end_once(
    make_bus: BusFactory, exchange_name: str
) -> None:
    """Requests sent around a forced close each end exactly once, and the effect runs once."""
    effects: list[int] = []

    async def handler(request: RequestEnvelope) -> int:
        n = int(request.payload.parameters["n"])
        effects.append(n)
        await asyncio.sleep(0.01)
        return n

    server = await make_bus(f"srv-{exchange_name}", reconnect_interval=0.2)
    await server.serve(handler, service="svc", prefetch=8)
    client = await make_bus(f"cli-{exchange_name}", reconnect_interval=0.2)

    async def one(n: int) -> str:
        try:
            reply = await client.request("svc", "work", {"n": n}, timeout=20)
        except Exception as exc:
            return type(exc).__name__
        assert reply.result == n
        return "reply"

    tasks = [asyncio.create_task(one(n)) for n in range(60)]
    await wait_until(lambda: len(effects) >= 10, timeout=10)
    await force_close(f"agentbus:srv-{exchange_name}")
    outcomes = await asyncio.gather(*tasks)

    assert len(outcomes) == 60
    assert outcomes.count("reply") == 60, outcomes
    assert sorted(set(effects)) == list(range(60))
    assert len(effects) == len(set(effects)), "an effect ran twice"
