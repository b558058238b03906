"""Requests across sites: served at this site when an instance runs here, else at a peer's.

A site is one broker (or cluster); sites are linked by RabbitMQ federation as
``agentbus federation`` sets it up (docs/sites.md). A request crosses only when nothing
here consumes its receiver's queue: then it is published on the outbox of each peer site
in turn (``<exchange>.outbox.<site>``) until one routes it, without ``reply_to``, so its
progress and answer come back by ``agent.<sender>.response``, which the link carries home.

A peer whose beacon here is empty (no heartbeat of its agents heard for three of their
intervals: the link is down) is skipped, and a request only it could serve fails at once
with ``SiteUnreachable``, rather than waiting in the link's queue for its whole timeout.
A request every reachable peer's outbox refuses is ``Unroutable``, naming those peers: none
serves it, or the link that carries it there is down: stopped (its queue, and so the
outbox's bindings, went with it) or gone for longer than its queue's ``expires``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, Generic, TypeVar, Unpack

from agentbus._exceptions import AgentBusError, SiteUnreachable, Unroutable
from agentbus._logging import get_logger
from agentbus._topology import Topology
from agentbus.bus._options import PublishOptions
from agentbus.bus._requests import RequestPublisher
from agentbus.envelopes import RequestEnvelope

__all__ = ["Across", "Crossing", "SiteRouter"]

T = TypeVar("T")

LocalCheck = Callable[[str], Awaitable[bool]]
"""Whether something at this site consumes the receiver's queue (service or instance)."""

HeardCheck = Callable[[str], Awaitable[bool | None]]
"""Whether a heartbeat from the peer site was heard here lately; None: no beacon to tell."""

_REMEMBER: Final = 1.0  # s an answer of a look holds, per receiver or per peer
_MAX_REMEMBERED: Final = 1024
_log = get_logger("agentbus.bus")


@dataclass(frozen=True, slots=True)
class Across:
    """Where a request that nothing here serves goes.

    Attributes:
        outboxes: The outbox of each peer site to try, by site, in order.
        unreachable: The peer sites skipped: none of their heartbeats heard lately.
    """

    outboxes: Mapping[str, str]
    unreachable: tuple[str, ...] = ()


class SiteRouter:
    """Decides, per receiver, whether a request stays at this site or crosses to a peer."""

    def __init__(
        self,
        topology: Topology,
        peers: tuple[str, ...],
        local: LocalCheck,
        heard: HeardCheck | None = None,
        *,
        remember: float = _REMEMBER,
    ) -> None:
        self._peers = peers
        self._outboxes = {peer: topology.outbox(peer) for peer in peers}
        self._local = _Looks(local, remember)
        self._heard = _Looks(heard or _no_beacon, remember)

    @property
    def active(self) -> bool:
        """Whether this bus has peer sites at all."""
        return bool(self._peers)

    async def crossing(self, receiver: str) -> Across | None:
        """Where a request to ``receiver`` goes across; None: serve it here."""
        if not self._peers:
            return None
        try:
            here = await self._local.look(receiver)
        except AgentBusError as exc:
            # Not known: stay here, as a bus without sites would (the presence check follows).
            _log.debug("local instance not checked", receiver=receiver, error=str(exc))
            return None
        if here:
            return None
        heard = await asyncio.gather(*(self._heard_from(peer) for peer in self._peers))
        silent = {peer for peer, h in zip(self._peers, heard, strict=True) if h is False}
        return Across(
            {peer: self._outboxes[peer] for peer in self._peers if peer not in silent},
            tuple(peer for peer in self._peers if peer in silent),
        )

    async def _heard_from(self, peer: str) -> bool | None:
        try:
            return await self._heard.look(peer)
        except AgentBusError as exc:
            _log.debug("peer site's beacon not checked", site=peer, error=str(exc))
            return None  # not known: try the peer, its outbox decides


class _Looks(Generic[T]):
    """One look per key at a time, its answer good for ``remember`` seconds."""

    def __init__(self, look: Callable[[str], Awaitable[T]], remember: float) -> None:
        self._look = look
        self._remember = remember
        self._looks: dict[str, tuple[float, asyncio.Future[T]]] = {}

    async def look(self, key: str) -> T:
        loop = asyncio.get_running_loop()
        cached = self._looks.get(key)
        if cached is None or (cached[1].done() and loop.time() - cached[0] > self._remember):
            fresh = asyncio.ensure_future(self._look(key))
            cached = self._looks[key] = (loop.time(), fresh)
            fresh.add_done_callback(_retrieved)
            if len(self._looks) > _MAX_REMEMBERED:
                self._looks.pop(next(iter(self._looks)))
        try:
            return await asyncio.shield(cached[1])
        except AgentBusError:
            self._looks.pop(key, None)  # the next request looks again
            raise


class Crossing:
    """Publishes a request on each reachable peer's outbox in turn, until one routes it."""

    def __init__(self, publisher: RequestPublisher, across: Across) -> None:
        self._publisher = publisher
        self._across = across

    async def publish(self, envelope: RequestEnvelope, **options: Unpack[PublishOptions]) -> None:
        """Publish ``envelope`` across.

        Raises:
            SiteUnreachable: no reachable peer serves its receiver, and some peer is not
                heard from (it might, with its link up).
            Unroutable: no reachable peer routes it: none serves its receiver, or the link
                to it is down (stopped: its bindings here went with it).
        """
        # No reply_to: a queue name means nothing at the far site; the answer comes back
        # by the requester's routing key, which the link carries home.
        receiver = envelope.receiver_id
        refused: Unroutable | None = None
        for outbox in self._across.outboxes.values():
            try:
                await self._publisher.publish(envelope, **_across(options, outbox))
            except Unroutable as exc:
                refused = exc
                continue
            return
        if self._across.unreachable:
            sites = ", ".join(self._across.unreachable)
            raise SiteUnreachable(
                f"nothing at this site serves {receiver!r}, and no heartbeat was "
                f"heard lately from the site(s) that might: {sites} (the link is down)",
                details={"receiver": receiver, "sites": list(self._across.unreachable)},
            )
        assert refused is not None  # a router has peers, and an empty Across skips none
        # The far site's bindings reach its outbox here by the link it runs: a link stopped
        # (its upstream removed) takes them with it, and reads like a site not serving it.
        peers = list(self._across.outboxes)
        raise Unroutable(
            f"nothing at this site serves {receiver!r}, and the peer site(s) {', '.join(peers)} "
            "did not take it: nothing serves it there either, or the link to them is down "
            "(rabbitmqctl federation_status there; docs/sites.md)",
            details={**refused.details, "receiver": receiver, "sites": peers},
        ) from refused


def _across(options: PublishOptions, outbox: str) -> PublishOptions:
    return {**options, "reply_to": None, "mandatory": True, "exchange": outbox}


async def _no_beacon(site: str) -> bool | None:
    return None


def _retrieved(look: asyncio.Future[T]) -> None:
    if not look.cancelled():
        look.exception()
