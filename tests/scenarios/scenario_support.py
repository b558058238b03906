"""Helpers for the shared scenarios: the transport factory's type, broker cleanup."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any, Protocol

import aio_pika

from agentbus.bus import Topology, Transport


class TransportFactory(Protocol):
    async def __call__(self, agent_id: str | None = None, **settings: Any) -> Transport: ...


async def delete_topology(
    url: str, topology: Topology, transports: Iterable[Transport], extra_queues: Iterable[str] = ()
) -> None:
    """Delete, on a real broker, the queues and exchanges a test's buses declared."""
    queues = {topology.dead_letter_queue, *extra_queues}
    for transport in transports:
        queues.add(topology.instance_queue(transport.agent_id))
        if transport.service is not None:
            queues.add(topology.service_queue(transport.service))
    connection = await aio_pika.connect(url)
    async with connection:
        for name in sorted(queues):
            channel = await connection.channel()
            with contextlib.suppress(Exception):
                await channel.queue_delete(name)
        for name in (topology.exchange, topology.dead_letter_exchange):
            channel = await connection.channel()
            with contextlib.suppress(Exception):
                await channel.exchange_delete(name)
