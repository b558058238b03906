"""The HTTP faces' callers: one bus per identity, and none left open when opening it fails."""

from __future__ import annotations

from typing import Any

import pytest

from agentbus import Settings
from agentbus._exceptions import AgentBusError
from agentbus.envelopes import ErrorCode
from agentbus.testing import MemoryBroker, MemoryBus

pytest.importorskip("a2a")  # the gateway's extra
from agentbus.gateway import ApiKeys
from agentbus.gateway import _callers as gateway_callers


class _RefusingBus(MemoryBus):
    """A bus that opens, then cannot subscribe (the broker refuses the binding, say)."""

    async def subscribe(self, pattern: str, handler: Any) -> None:
        raise AgentBusError("the binding was refused", code=ErrorCode.UNAUTHORIZED)


async def test_the_gateway_callers_close_a_bus_whose_subscription_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A caller's bus that opened but could not subscribe is closed, not left open."""
    broker = MemoryBroker()
    made: list[MemoryBus] = []

    def refusing_bus(settings: Settings, *, agent_id: str, app_id: str) -> MemoryBus:
        bus = _RefusingBus(broker, settings, agent_id=agent_id, app_id=app_id)
        made.append(bus)
        return bus

    monkeypatch.setattr(gateway_callers, "Bus", refusing_bus)
    callers = gateway_callers.Callers(Settings(), ApiKeys({}, allow_anonymous=True))
    with pytest.raises(AgentBusError, match="refused"):
        await callers.bus("alice")
    try:
        assert len(made) == 1
        assert not made[0].is_open
    finally:
        await made[0].aclose()
        await callers.aclose()
