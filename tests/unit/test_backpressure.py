"""The bus's cap on outstanding requests and publishes: callers wait for a slot, not fail."""

from __future__ import annotations

import asyncio

import pytest

from agentbus import RequestTimeout, Settings
from agentbus.envelopes import RequestEnvelope
from agentbus.testing import MemoryBroker, MemoryBus
from support.waiting import wait_until


async def test_requests_past_the_cap_wait_for_a_slot_then_all_complete() -> None:
    """With max_outstanding=2, five requests: two are out at a time, all five are answered."""
    broker = MemoryBroker()
    release = asyncio.Event()
    seen: list[str] = []

    async def handler(request: RequestEnvelope) -> int:
        seen.append(request.message_id)
        await release.wait()
        return len(seen)

    async with (
        MemoryBus(broker, agent_id="server") as server,
        MemoryBus(broker, Settings(max_outstanding=2), agent_id="client") as client,
    ):
        await server.serve(handler, service="slow", prefetch=10)
        calls = [asyncio.create_task(client.request("slow", "work", timeout=10)) for _ in range(5)]
        await wait_until(lambda: len(seen) == 2 and client.in_flight == 5)

        assert client.outstanding == 2
        assert client.in_flight == 5, "the other three wait for a slot"
        assert len(seen) == 2, "a request past the cap reached the server"
        release.set()
        replies = await asyncio.gather(*calls)

    assert len(replies) == 5
    assert len(seen) == 5
    assert client.outstanding == 0


async def test_waiting_for_a_slot_counts_against_the_request_timeout() -> None:
    """A request that never gets a slot times out within its own timeout, freeing nothing."""
    broker = MemoryBroker()
    release = asyncio.Event()

    async def handler(request: RequestEnvelope) -> None:
        await release.wait()

    async with (
        MemoryBus(broker, agent_id="server") as server,
        MemoryBus(broker, Settings(max_outstanding=1), agent_id="client") as client,
    ):
        await server.serve(handler, service="slow")
        first = asyncio.create_task(client.request("slow", "work", timeout=10))
        await wait_until(lambda: client.outstanding == 1)

        with pytest.raises(RequestTimeout):
            await client.request("slow", "work", timeout=0.2)
        assert client.outstanding == 1
        release.set()
        await first
    assert client.outstanding == 0
