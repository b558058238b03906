"""``agentbus schema asyncapi``: the AsyncAPI document of a team, from classes or a registry."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from agentbus._config import Settings
from agentbus._exceptions import AgentBusError
from agentbus._loop import run as run_loop
from agentbus.agents import AgentCard
from agentbus.bus import Bus
from agentbus.cli._asyncapi_document import asyncapi_document
from agentbus.cli._serve import _load_agent_class

__all__ = ["team_asyncapi"]


def team_asyncapi(
    settings: Settings,
    targets: Sequence[str],
    registry: str,
    timeout: float,
    agent_id: str | None = None,
) -> dict[str, Any]:
    """The AsyncAPI document of the agent classes ``targets`` (``module:Class``).

    Without targets, of the team the ``registry`` service knows on the broker: one card per
    service, fetched from the registry.
    """
    if targets:
        cards = [_card_of(target) for target in targets]
    else:
        cards = run_loop(_registry_cards(settings, registry, timeout, agent_id))
    return asyncapi_document(cards, exchange=settings.exchange, url=settings.url)


def _card_of(target: str) -> AgentCard:
    cls = _load_agent_class(target)
    try:
        return cls(agent_id=f"{cls.name}-asyncapi").card
    except (AgentBusError, TypeError) as exc:
        raise click.BadParameter(f"cannot make the card of {target!r}: {exc}") from exc


async def _registry_cards(
    settings: Settings, registry: str, timeout: float, agent_id: str | None
) -> list[AgentCard]:
    async with Bus(settings, agent_id=agent_id) as bus:
        reply = await bus.request(registry, "list_agents", timeout=timeout)
        first: dict[str, str] = {}
        for row in sorted(reply.result, key=lambda row: row["agent_id"]):
            first.setdefault(row["service"], row["agent_id"])
        cards = []
        for agent_id in first.values():
            card = await bus.request(registry, "get_card", {"agent_id": agent_id}, timeout=timeout)
            cards.append(AgentCard.model_validate(card.result))
    return cards
