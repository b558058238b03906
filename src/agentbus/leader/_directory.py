"""Who offers a skill: the registry's answer, cached briefly and shared by concurrent asks."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from typing import Final

from pydantic import TypeAdapter, ValidationError

from agentbus._exceptions import AgentBusError, NoCapableAgent
from agentbus.bus import Transport
from agentbus.registry import AgentInfo

__all__ = ["SkillDirectory"]

_AGENTS: Final = TypeAdapter(list[AgentInfo])


class SkillDirectory:
    """Looks skills up with the registry's ``find_skill``; one lookup per skill per ``ttl``."""

    def __init__(
        self,
        bus: Transport,
        *,
        registry: str = "registry",
        ttl: float = 2.0,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._bus = bus
        self._registry = registry
        self._ttl = ttl
        self._timeout = timeout
        self._clock = clock
        self._cache: dict[str, tuple[float, list[AgentInfo]]] = {}
        self._lookups: dict[str, asyncio.Task[list[AgentInfo]]] = {}
        self._gone: set[str] = set()

    async def capable(self, skill: str, *, fresh: bool = False) -> list[AgentInfo]:
        """Return live agents offering ``skill``, best first.

        Raises:
            NoCapableAgent: none is alive, or no registry answers.
        """
        cached = self._cache.get(skill)
        if cached is not None and not fresh and self._clock() - cached[0] < self._ttl:
            agents = cached[1]
        else:
            agents = await self._lookup(skill)
        agents = [agent for agent in agents if agent.agent_id not in self._gone]
        if not agents:
            raise NoCapableAgent(f"no live agent offers the skill {skill!r}")
        return agents

    def forget(self, agent_id: str) -> None:
        """Leave out an agent reported offline until the registry lists it again."""
        self._gone.add(agent_id)

    async def _lookup(self, skill: str) -> list[AgentInfo]:
        # One lookup per skill at a time, in its own task: an asker cancelled (its plan
        # stopped) leaves the others sharing it served.
        lookup = self._lookups.get(skill)
        if lookup is None:
            lookup = asyncio.create_task(self._refresh(skill))
            self._lookups[skill] = lookup
            lookup.add_done_callback(functools.partial(self._looked_up, skill))
        return await asyncio.shield(lookup)

    async def _refresh(self, skill: str) -> list[AgentInfo]:
        agents = await self._ask(skill)
        self._gone -= {agent.agent_id for agent in agents}
        self._cache[skill] = (self._clock(), agents)
        return agents

    def _looked_up(self, skill: str, lookup: asyncio.Task[list[AgentInfo]]) -> None:
        self._lookups.pop(skill, None)
        if not lookup.cancelled():
            lookup.exception()  # retrieved, even when every asker was cancelled

    async def _ask(self, skill: str) -> list[AgentInfo]:
        # The edge: the registry's reply becomes AgentInfo here, or NoCapableAgent.
        try:
            reply = await self._bus.request(
                self._registry, "find_skill", {"skill": skill}, timeout=self._timeout
            )
        except AgentBusError as exc:
            raise NoCapableAgent(
                f"cannot find agents for skill {skill!r}: the registry did not answer ({exc})"
            ) from exc
        try:
            return _AGENTS.validate_python(reply.result or [])
        except ValidationError as exc:
            raise NoCapableAgent(
                f"cannot find agents for skill {skill!r}: the registry's answer is not a list "
                f"of agents ({exc.error_count()} errors)"
            ) from exc
