"""Callers on the bus: one bus per identity, so agents see (and audit) who asked.

Over HTTP each bearer key's identity gets a bus of its own, with agent id
``<identity>-<random>`` and, when its key names a broker URL, that broker user. Each
bus is followed for the plans sent from it (``PlanWatch``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from agentbus._config import Settings
from agentbus._exceptions import AgentBusError
from agentbus._http._keys import ApiKeys
from agentbus._http._plans import PlanWatch
from agentbus.bus import Bus, Transport, verifies_sender
from agentbus.envelopes import ErrorCode

__all__ = ["Callers", "Connect"]

Connect = Callable[[Settings, str], Transport]
"""Make an unopened bus with these settings and this agent id."""


class Callers:
    """Opens a bus per identity on first use (``<identity>-<random>``), each followed for plans.

    Args:
        settings: The bus settings; an identity's ``url`` replaces the broker URL.
        keys: The API keys: who each identity is on the broker.
        plans: Where the plans' progress sent to these buses goes.
        app_id: The AMQP ``app_id`` of what these buses send (the face's name).
        connect: How a bus is made (the RabbitMQ ``Bus`` unless a test says otherwise).
    """

    def __init__(
        self,
        settings: Settings,
        keys: ApiKeys,
        plans: PlanWatch,
        *,
        app_id: str = "agentbus",
        connect: Connect | None = None,
    ) -> None:
        self._settings = settings
        self._keys = keys
        self._plans = plans
        self._app_id = app_id
        self._connect = connect or self._bus
        self._buses: dict[str, Transport] = {}
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"<Callers {self._app_id} {sorted(self._buses)}>"

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

    def _bus(self, settings: Settings, agent_id: str) -> Transport:
        return Bus(settings, agent_id=agent_id, app_id=self._app_id)

    async def _open(self, identity: str) -> Transport:
        url = self._keys.named(identity).url
        settings = self._settings
        if url is not None:
            settings = settings.model_copy(update={"url": url})
        elif verifies_sender(settings):
            # Its requests would carry the face's broker user, not its own.
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
            # Not kept: nobody else would close it.
            await bus.aclose()
            raise
        return bus

    async def aclose(self) -> None:
        """Close every identity's bus."""
        buses = list(self._buses.values())
        self._buses.clear()
        await asyncio.gather(*(bus.aclose() for bus in buses), return_exceptions=True)
