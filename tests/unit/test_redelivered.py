"""``redelivered()``: a handler can tell a first delivery from one that came back."""

from __future__ import annotations

import asyncio

from agentbus import Settings
from agentbus.bus import redelivered
from agentbus.envelopes import RequestEnvelope
from agentbus.testing import MemoryBroker, MemoryBus

SETTINGS = Settings(shutdown_grace=0.1)


def test_outside_a_delivery_it_is_not_known() -> None:
    assert redelivered() is None


async def test_first_delivery_then_the_copy_that_came_back() -> None:
    broker = MemoryBroker()
    seen: list[tuple[str, bool | None]] = []
    holding = asyncio.Event()

    async def serve(bus: MemoryBus, hold: bool) -> None:
        async def probe(request: RequestEnvelope) -> dict[str, bool]:
            seen.append((bus.agent_id, redelivered()))
            if hold:
                holding.set()
                await asyncio.Event().wait()  # until its bus goes
            return {"ok": True}

        await bus.serve(probe, service="worker")

    first = MemoryBus(broker, SETTINGS, agent_id="worker-1")
    second = MemoryBus(broker, SETTINGS, agent_id="worker-2")
    client = MemoryBus(broker, SETTINGS, agent_id="client-1")
    async with first, client:
        await serve(first, hold=True)
        asking = asyncio.create_task(client.request("worker", "probe", {}, timeout=10))
        await asyncio.wait_for(holding.wait(), 5)
        await first.drain(grace=0)  # the request goes back to the service queue
        async with second:
            await serve(second, hold=False)
            reply = await asyncio.wait_for(asking, 10)
    assert reply.result == {"ok": True}
    assert seen == [("worker-1", False), ("worker-2", True)]
