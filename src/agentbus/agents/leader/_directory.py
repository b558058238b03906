"""Who offers a skill: the registry's answer, cached briefly and shared by concurrent asks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from agentbus._exceptions import AgentBusError
from agentbus.bus import Transport
from agentbus.envelopes import ErrorCode

__all__ = ["NoCapableAgent", "SkillDirectory"]


class NoCapableAgent(AgentBusError):
    """No live agent offers the skill (or no registry is there to say)."""

    code: str = ErrorCode.NO_CAPABLE_AGENT


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
        self._cache: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self._lookups: dict[str, asyncio.Future[list[dict[str, Any]]]] = {}
        self._gone: set[str] = set()

    async def capable(self, skill: str, *, fresh: bool = False) -> list[dict[str, Any]]:
        """Return live agents offering ``skill``, best first.

        Raises:
            NoCapableAgent: none is alive, or no registry answers.
        """
        cached = self._cache.get(skill)
        if cached is not None and not fresh and self._clock() - cached[0] < self._ttl:
            agents = cached[1]
        else:
            agents = await self._lookup(skill)
        agents = [agent for agent in agents if agent["agent_id"] not in self._gone]
        if not agents:
            raise NoCapableAgent(f"no live agent offers the skill {skill!r}")
        return agents

    def forget(self, agent_id: str) -> None:
        """Leave out an agent reported offline until the registry lists it again."""
        self._gone.add(agent_id)

    async def _lookup(self, skill: str) -> list[dict[str, Any]]:
        running = self._lookups.get(skill)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[list[dict[str, Any]]] = asyncio.get_running_loop().create_future()
        self._lookups[skill] = future
        try:
            reply = await self._bus.request(
                self._registry, "find_skill", {"skill": skill}, timeout=self._timeout
            )
            agents: list[dict[str, Any]] = list(reply.result or [])
        except AgentBusError as exc:
            error = NoCapableAgent(
                f"cannot find agents for skill {skill!r}: the registry did not answer ({exc})"
            )
            future.set_exception(error)
            future.exception()  # retrieved: waiters re-raise it
            raise error from exc
        finally:
            self._lookups.pop(skill, None)
        listed = {agent["agent_id"] for agent in agents}
        self._gone -= listed
        self._cache[skill] = (self._clock(), agents)
        future.set_result(agents)
        return agents
