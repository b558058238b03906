"""Which services are live, and their cards: the registry's view, kept as agents come and go."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Final

from pydantic import ValidationError

from agentbus._exceptions import AgentBusError
from agentbus._logging import get_logger
from agentbus.agents import AGENT_OFFLINE, AGENT_ONLINE, AgentCard
from agentbus.bus import Transport
from agentbus.envelopes import EventEnvelope

__all__ = ["ServiceDirectory"]

_log = get_logger("agentbus.registry")
_ASK_TIMEOUT: Final = 5.0


class ServiceDirectory:
    """Live services with skills and one card each, from the registry's ``list_agents``,
    and the sites each runs at (``sites``: none for a team of one site).

    Looks every ``interval`` seconds, and at once on ``agent_online`` / ``agent_offline``;
    ``on_change`` is called when a service appears, leaves, or changes its card.
    """

    def __init__(
        self,
        bus: Transport,
        *,
        registry: str = "registry",
        interval: float = 1.0,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._bus = bus
        self._registry = registry
        self._interval = interval
        self._on_change = on_change
        self.cards: dict[str, AgentCard] = {}
        self.sites: dict[str, tuple[str, ...]] = {}
        self._digests: dict[str, str] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def __repr__(self) -> str:
        return f"<ServiceDirectory services={sorted(self.cards)}>"

    async def start(self) -> None:
        """Look once, then keep looking in the background."""
        for event in (AGENT_ONLINE, AGENT_OFFLINE):
            await self._bus.subscribe(f"broadcast.event.{event}", self._on_event)
        await self._refresh_logged()
        self._task = asyncio.create_task(self._run())

    async def aclose(self) -> None:
        """Stop looking."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _on_event(self, event: EventEnvelope) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval)
            self._wake.clear()
            await self._refresh_logged()

    async def _refresh_logged(self) -> None:
        # One warning when the registry stops answering, one line when it is back.
        try:
            await self.refresh()
        except AgentBusError as exc:
            log = _log.debug if self._failing else _log.warning
            log("registry not asked", registry=self._registry, error=str(exc))
            self._failing = True
            return
        if self._failing:
            _log.info("registry answers again", registry=self._registry)
            self._failing = False

    async def refresh(self) -> None:
        """Ask the registry once and update the cards.

        Raises:
            AgentBusError: the registry did not answer.
        """
        reply = await self._bus.request(self._registry, "list_agents", {}, timeout=_ASK_TIMEOUT)
        live, where = _live(reply.result)
        cards: dict[str, AgentCard] = {}
        digests: dict[str, str] = {}
        for service, row in live.items():
            digest = row["card_digest"]
            card = self.cards.get(service) if self._digests.get(service) == digest else None
            if card is None:
                card = await self._fetch(row["agent_id"])
            if card is not None:
                cards[service] = card
                digests[service] = digest
        sites = {service: tuple(sorted(where[service])) for service in cards if service in where}
        changed = digests != self._digests or sites != self.sites
        self.cards, self._digests, self.sites = cards, digests, sites
        if changed:
            _log.info("services changed", services=sorted(cards))
            if self._on_change is not None:
                self._on_change()

    async def _fetch(self, agent_id: str) -> AgentCard | None:
        try:
            reply = await self._bus.request(
                self._registry, "get_card", {"agent_id": agent_id}, timeout=_ASK_TIMEOUT
            )
            return AgentCard.model_validate(reply.result)
        except (AgentBusError, ValidationError) as exc:
            _log.info("card not fetched", agent_id=agent_id, error=str(exc))
            return None


def _live(rows: list[dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], dict[str, set[str]]]:
    # One live row per service with skills, and the sites each runs at.
    live: dict[str, dict[str, Any]] = {}
    where: dict[str, set[str]] = {}
    for row in rows:
        if row.get("skills") and row.get("status") != "offline":
            live.setdefault(row["service"], row)
            if row.get("site"):
                where.setdefault(row["service"], set()).add(row["site"])
    return live, where
