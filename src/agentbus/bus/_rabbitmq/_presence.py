"""Who is there, as the broker's queues tell: a passive declare of each, one channel a look.

The bus's presence check (a request's receiver with work waiting and no consumer) and the
site router's looks (``bus/_sites.py``: an instance here, a peer site heard from) on RabbitMQ.
"""

from __future__ import annotations

import aiormq.exceptions
from aio_pika.abc import AbstractRobustConnection

from agentbus._topology import Topology
from agentbus.bus._rabbitmq._amqp import scratch_channel
from agentbus.bus._rabbitmq._errors import map_transport_errors

__all__ = ["heard_from", "served_here", "unserved"]


async def unserved(
    connection: AbstractRobustConnection, topology: Topology, receiver: str
) -> bool | None:
    """Whether ``receiver``'s queue (service, else instance) holds work nobody consumes;
    None: ``receiver`` has no queue."""
    for name in (topology.service_queue(receiver), topology.instance_queue(receiver)):
        declared = await _declared(connection, name)
        if declared is None:
            continue
        # Ready messages and no consumer: requests wait there that nobody will take.
        # No ready message: ours was delivered, maybe to an instance now draining.
        return declared[1] == 0 and declared[0] > 0
    return None


async def served_here(
    connection: AbstractRobustConnection, topology: Topology, receiver: str
) -> bool:
    """Whether something consumes ``receiver``'s service queue, else its instance queue."""
    for name in (topology.service_queue(receiver), topology.instance_queue(receiver)):
        declared = await _declared(connection, name)
        if declared is not None and declared[1]:  # a consumer
            return True
    return False


async def heard_from(
    connection: AbstractRobustConnection, topology: Topology, site: str
) -> bool | None:
    """Whether this site's beacon for ``site`` holds a heartbeat; None: there is no beacon."""
    declared = await _declared(connection, topology.site_beacon(site))
    return None if declared is None else declared[0] > 0


async def _declared(connection: AbstractRobustConnection, name: str) -> tuple[int, int] | None:
    # A queue's ready messages and consumers; None: there is no such queue. A passive
    # declare of a missing queue closes its channel: one channel per look.
    with map_transport_errors():
        try:
            async with scratch_channel(connection) as channel:
                queue = await channel.declare_queue(name, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return None
    result = queue.declaration_result
    return result.message_count or 0, result.consumer_count or 0
