"""The bus on a real RabbitMQ, beyond the scenarios shared with the in-memory bus.

tests/scenarios runs request/response, errors, unroutable requests, timeouts, broadcast,
competing consumers, duplicates, deadlines and closing on both transports.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from helpers import BusFactory

from agentbus import (
    ConfigurationError,
    RequestEnvelope,
    RequestTimeout,
)
from waiting import wait_until


async def echo(request: RequestEnvelope) -> dict[str, Any]:
    return {"echo": request.payload.parameters, "action": request.payload.action}


async def test_request_to_an_instance_id_reaches_that_instance(make_bus: BusFactory) -> None:
    """A request addressed to an instance id is served by that instance."""
    server = await make_bus("only-me")
    await server.serve(echo)
    client = await make_bus()

    reply = await client.request("only-me", "ping", timeout=10)

    assert reply.sender_id == "only-me"


async def test_hundred_concurrent_requests_with_mixed_timeouts_end_once(
    make_bus: BusFactory,
) -> None:
    """100 requests in flight at once each end exactly once: a reply or a timeout."""
    release = asyncio.Event()

    async def handler(request: RequestEnvelope) -> int:
        if request.payload.parameters["slow"]:
            await release.wait()
        return int(request.payload.parameters["i"])

    server = await make_bus(prefetch=200)
    await server.serve(handler, service="mixed", prefetch=200)
    client = await make_bus()

    async def one(i: int) -> str:
        slow = i % 2 == 1
        try:
            reply = await client.request(
                "mixed", "work", {"i": i, "slow": slow}, timeout=0.5 if slow else 20
            )
        except RequestTimeout:
            return "timeout"
        assert reply.result == i
        return "reply"

    outcomes = await asyncio.gather(*(one(i) for i in range(100)))
    release.set()

    assert Counter(outcomes) == {"reply": 50, "timeout": 50}
    assert client.in_flight == 0
    # The slow ones are answered after their requesters gave up: dropped and counted.
    await wait_until(lambda: client.stats.late_replies == 50, timeout=20)
    assert client.stats.replies_matched == 50
    assert client.stats.unknown_replies == 0


async def test_invalid_service_name_is_refused(make_bus: BusFactory) -> None:
    """A service name outside the id grammar is a ConfigurationError, nothing declared."""
    bus = await make_bus()

    with pytest.raises(ConfigurationError):
        await bus.serve(echo, service="has.dot")
