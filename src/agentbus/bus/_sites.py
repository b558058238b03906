"""Requests across sites: served at this site when an instance runs here, else at a peer's.

A site is one broker (or cluster); sites are linked by RabbitMQ federation as
``agentbus federation`` sets it up (docs/sites.md). A request crosses only when nothing
here consumes its receiver's queue: then it is published on the outbox of each peer site
in turn (``<exchange>.outbox.<site>``) until one routes it, without ``reply_to``, so its
progress and answer come back by ``agent.<sender>.response``, which the link carries home.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final, Unpack

import aiormq.exceptions
from aio_pika.abc import AbstractRobustConnection

from agentbus._exceptions import AgentBusError, Unroutable
from agentbus._logging import get_logger
from agentbus._topology import Topology
from agentbus.bus._amqp import scratch_channel
from agentbus.bus._errors import map_transport_errors
from agentbus.bus._options import PublishOptions
from agentbus.bus._requests import RequestPublisher
from agentbus.envelopes import RequestEnvelope

__all__ = ["Crossing", "SiteRouter", "served_here"]

LocalCheck = Callable[[str], Awaitable[bool]]
"""Whether something at this site consumes the receiver's queue (service or instance)."""

_REMEMBER: Final = 1.0  # s an answer of the local check holds, per receiver
_MAX_REMEMBERED: Final = 1024
_log = get_logger("agentbus.bus")


class SiteRouter:
    """Decides, per receiver, whether a request stays at this site or crosses to a peer."""

    def __init__(
        self,
        topology: Topology,
        peers: tuple[str, ...],
        local: LocalCheck,
        *,
        remember: float = _REMEMBER,
    ) -> None:
        self.outboxes = tuple(topology.outbox(peer) for peer in peers)
        self._local = local
        self._remember = remember
        self._looks: dict[str, tuple[float, asyncio.Future[bool]]] = {}

    @property
    def active(self) -> bool:
        """Whether this bus has peer sites at all."""
        return bool(self.outboxes)

    async def crossing(self, receiver: str) -> tuple[str, ...]:
        """The outboxes to try for a request to ``receiver``; empty: serve it here."""
        if not self.outboxes:
            return ()
        try:
            here = await self._served_here(receiver)
        except AgentBusError as exc:
            # Not known: stay here, as a bus without sites would (the presence check follows).
            _log.debug("local instance not checked", receiver=receiver, error=str(exc))
            return ()
        return () if here else self.outboxes

    async def _served_here(self, receiver: str) -> bool:
        # One look per receiver at a time, its answer good for ``remember`` seconds.
        loop = asyncio.get_running_loop()
        cached = self._looks.get(receiver)
        if cached is None or (cached[1].done() and loop.time() - cached[0] > self._remember):
            fresh = asyncio.ensure_future(self._local(receiver))
            cached = self._looks[receiver] = (loop.time(), fresh)
            fresh.add_done_callback(_retrieved)
            if len(self._looks) > _MAX_REMEMBERED:
                self._looks.pop(next(iter(self._looks)))
        try:
            return await asyncio.shield(cached[1])
        except AgentBusError:
            self._looks.pop(receiver, None)  # the next request looks again
            raise


class Crossing:
    """Publishes a request on each peer's outbox in turn, until one routes it."""

    def __init__(self, publisher: RequestPublisher, outboxes: tuple[str, ...]) -> None:
        self._publisher = publisher
        self._outboxes = outboxes

    async def publish(self, envelope: RequestEnvelope, **options: Unpack[PublishOptions]) -> None:
        """Publish ``envelope`` across; ``Unroutable`` when no peer serves its receiver."""
        # No reply_to: a queue name means nothing at the far site; the answer comes back
        # by the requester's routing key, which the link carries home.
        for outbox in self._outboxes[:-1]:
            try:
                await self._publisher.publish(envelope, **_across(options, outbox))
            except Unroutable:
                continue
            return
        await self._publisher.publish(envelope, **_across(options, self._outboxes[-1]))


async def served_here(
    connection: AbstractRobustConnection, topology: Topology, receiver: str
) -> bool:
    """Whether something consumes ``receiver``'s service queue, else its instance queue."""
    for name in (topology.service_queue(receiver), topology.instance_queue(receiver)):
        # A passive declare of a missing queue closes its channel: one per look.
        with map_transport_errors():
            try:
                async with scratch_channel(connection) as channel:
                    queue = await channel.declare_queue(name, passive=True)
            except aiormq.exceptions.ChannelNotFoundEntity:
                continue
        if queue.declaration_result.consumer_count:
            return True
    return False


def _across(options: PublishOptions, outbox: str) -> PublishOptions:
    return {**options, "reply_to": None, "mandatory": True, "exchange": outbox}


def _retrieved(look: asyncio.Future[bool]) -> None:
    if not look.cancelled():
        look.exception()
