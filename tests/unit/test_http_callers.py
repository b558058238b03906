"""The HTTP faces' callers: one bus per identity, and none left open when opening it fails."""

from __future__ import annotations

from typing import Any

import pytest

from agentbus import Settings
from agentbus._exceptions import AgentBusError
from agentbus._http import ApiKeys, Callers, PlanWatch
from agentbus.bus import Transport
from agentbus.envelopes import ErrorCode
from agentbus.testing import MemoryBroker, MemoryBus


class _RefusingBus(MemoryBus):
    """A bus that opens, then cannot subscribe (the broker refuses the binding, say)."""

    async def subscribe(self, pattern: str, handler: Any) -> None:
        raise AgentBusError("the binding was refused", code=ErrorCode.UNAUTHORIZED)


async def test_the_callers_close_a_bus_whose_subscription_fails() -> None:
    """A caller's bus that opened but could not subscribe is closed, not left open.

    The gateway's copy of the callers left it open (it was not kept either, so nobody
    closed it); the MCP server's closed it. Both faces now share this one.
    """
    broker = MemoryBroker()
    made: list[MemoryBus] = []

    def refusing_bus(settings: Settings, agent_id: str) -> Transport:
        bus = _RefusingBus(broker, settings, agent_id=agent_id, app_id="gateway")
        made.append(bus)
        return bus

    keys = ApiKeys({}, allow_anonymous=True)
    callers = Callers(Settings(), keys, PlanWatch(), app_id="gateway", connect=refusing_bus)
    with pytest.raises(AgentBusError, match="refused"):
        await callers.bus("alice")
    try:
        assert len(made) == 1
        assert not made[0].is_open
    finally:
        await made[0].aclose()
        await callers.aclose()


async def test_each_identity_gets_one_bus_of_its_own() -> None:
    """Calls from one identity share its bus; another identity gets another, named after it."""
    broker = MemoryBroker()

    def memory_bus(settings: Settings, agent_id: str) -> Transport:
        return MemoryBus(broker, settings, agent_id=agent_id, app_id="mcp")

    callers = Callers(
        Settings(), ApiKeys({}, allow_anonymous=True), PlanWatch(), connect=memory_bus
    )
    try:
        alice = await callers.bus("alice")
        assert await callers.bus("alice") is alice
        bob = await callers.bus("bob")
        assert bob is not alice
        assert alice.agent_id.startswith("alice-")
        assert bob.agent_id.startswith("bob-")
        assert alice.is_open
    finally:
        await callers.aclose()
    assert not alice.is_open
    assert not bob.is_open
