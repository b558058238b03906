"""A handler holds its request's acknowledgement for a write (``agentbus.bus.ack_after``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from agentbus import ConnectionLost, Settings
from agentbus.bus import ack_after
from agentbus.envelopes import RequestEnvelope, ResponseEnvelope
from agentbus.testing import MemoryBroker, MemoryBus

SETTINGS = Settings(shutdown_grace=0.2)
QUEUE = "agentbus.service.svc"


class Holding:
    """A handler that answers at once and holds its ack for the write it is given."""

    def __init__(self, *writes: asyncio.Future[None]) -> None:
        self.writes = list(writes)
        self.held: list[bool] = []

    async def __call__(self, request: RequestEnvelope) -> str:
        write = self.writes.pop(0) if self.writes else None
        self.held.append(write is not None and ack_after(write))
        return "done"


@contextlib.asynccontextmanager
async def _served(
    broker: MemoryBroker, handler: Holding, **options: Any
) -> AsyncIterator[tuple[MemoryBus, ResponseEnvelope]]:
    """``handler`` serving ``svc``, and the reply to one request."""
    async with MemoryBus(broker, SETTINGS, agent_id="svc-1") as server, MemoryBus(broker) as client:
        await server.serve(handler, service="svc", **options)
        yield server, await client.request("svc", "go", timeout=5)


async def test_the_answer_goes_and_the_ack_waits_for_the_write() -> None:
    loop = asyncio.get_running_loop()
    write = loop.create_future()
    handler = Holding(write)
    broker = MemoryBroker()
    async with _served(broker, handler) as (server, reply):
        served_before = server.stats.requests_served
        write.set_result(None)
        await broker.idle()
        served_after = server.stats.requests_served
    assert reply.result == "done"
    assert handler.held == [True]
    assert (served_before, served_after) == (0, 1)  # acknowledged once the write was in


async def test_a_failed_write_sends_the_request_back_to_run_again() -> None:
    loop = asyncio.get_running_loop()
    write = loop.create_future()
    handler = Holding(write)
    broker = MemoryBroker()
    async with _served(broker, handler) as (_, reply):
        write.set_exception(ConnectionLost("the write failed: injected"))
        await broker.idle()
        waiting = broker.message_count(QUEUE)
    assert reply.result == "done"
    assert handler.held == [True, False]  # run again (not answered from de-duplication)
    assert waiting == 0


async def test_nothing_is_held_outside_a_delivery_or_for_work_acked_as_it_starts() -> None:
    loop = asyncio.get_running_loop()
    outside = ack_after(loop.create_future())
    handler = Holding(loop.create_future())
    broker = MemoryBroker()
    async with _served(broker, handler, acks_early=lambda request: True) as (_, reply):
        pass
    assert outside is False
    assert reply.result == "done"
    assert handler.held == [False]  # long work: acknowledged already, its caller waits itself
