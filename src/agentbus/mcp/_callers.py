"""Callers on the bus: one bus per identity, so agents see (and audit) who asked.

Over stdio the one caller is the person whose client started the server: calls go on
the server's own bus. Over HTTP each bearer key's identity gets a bus of its own, with
agent id ``<identity>-<random>`` and, when its key names a broker URL, that broker user.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from agentbus._config import Settings
from agentbus._exceptions import AgentBusError
from agentbus.bus import Bus, Transport, verifies_sender
from agentbus.envelopes import ErrorCode
from agentbus.gateway import ApiKeys
from agentbus.mcp._plans import PlanWatch

__all__ = ["Callers", "Connect"]

Connect = Callable[[Settings, str], Transport]
"""Make an unopened bus with these settings and this agent id."""


def _bus(settings: Settings, agent_id: str) -> Transport:
    return Bus(settings, agent_id=agent_id, app_id="mcp")


class Callers:
    """Opens a bus per identity on first use (``<identity>-<random>``), each followed for plans.

    Args:
        settings: The bus settings; an identity's ``url`` replaces the broker URL.
        keys: The API keys: who each identity is on the broker.
        plans: Where the plans' progress sent to these buses goes.
        connect: How a bus is made (the RabbitMQ ``Bus`` unless a test says otherwise).
    """

    def __init__(
        self,
        settings: Settings,
        keys: ApiKeys,
        plans: PlanWatch,
        *,
        connect: Connect = _bus,
    ) -> None:
        self._settings = settings
        self._keys = keys
        self._plans = plans
        self._connect = connect
        self._buses: dict[str, Transport] = {}
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"<Callers {sorted(self._buses)}>"

    async def bus(self, identity: str) -> Transport:
        """Return the open bus of ``identity``, opening it the first time.

        Raises:
            AgentBusError: ``unauthorized`` when ``verify_sender`` is on and the identity
                has no broker URL of its own; a transport error when it cannot connect.
        """
        bus = self._buses.get(identity)
        if bus is not None:
            return bus
        async with self._lock:
            bus = self._buses.get(identity)
            if bus is None:
                bus = await self._open(identity)
                self._buses[identity] = bus
        return bus

    async def _open(self, identity: str) -> Transport:
        url = self._keys.named(identity).url
        settings = self._settings
        if url is not None:
            settings = settings.model_copy(update={"url": url})
        elif verifies_sender(settings):
            # Its requests would carry the server's broker user, not its own.
            raise AgentBusError(
                f"the identity {identity!r} has no broker user of its own, and "
                "verify_sender is on: give it a url in the keys file",
                code=ErrorCode.UNAUTHORIZED,
            )
        bus = self._connect(settings, f"{identity}-{uuid.uuid4().hex[:8]}")
        await bus.open()
        try:
            await self._plans.attach(bus)
        except BaseException:
            await bus.aclose()
            raise
        return bus

    async def aclose(self) -> None:
        """Close every identity's bus."""
        buses = list(self._buses.values())
        self._buses.clear()
        await asyncio.gather(*(bus.aclose() for bus in buses), return_exceptions=True)
