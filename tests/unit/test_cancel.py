"""Cancelling work: the cause a cancelled skill sees is a value, and send_cancel never raises."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentbus import Agent, RemoteError, skill
from agentbus.agents import CancelCause, cancel_cause, send_cancel
from agentbus.envelopes import RequestEnvelope, RequestPayload
from agentbus.testing import MemoryBroker, MemoryBus


class Sleeper(Agent):
    name = "sleeper"

    started: asyncio.Event
    causes: list[CancelCause | None]
    messages: list[str]

    @skill
    async def sleep(self) -> None:
        """Sleeps until cancelled, and notes why it was."""
        type(self).started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError as exc:
            type(self).causes.append(cancel_cause(exc))
            type(self).messages.append(str(exc))
            raise


class Logged:
    """A logger that keeps what it is told."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))


async def test_a_skill_stopped_by_a_cancel_request_sees_the_cause_as_a_value() -> None:
    """send_cancel on broadcast stops the work: the skill reads CancelCause.REQUEST, and words."""
    Sleeper.started, Sleeper.causes, Sleeper.messages = asyncio.Event(), [], []
    broker = MemoryBroker()
    async with Sleeper(bus=MemoryBus(broker, agent_id="sleeper-1")), MemoryBus(broker) as client:
        request = RequestEnvelope(
            sender_id=client.agent_id,
            receiver_id="sleeper",
            payload=RequestPayload(action="sleep"),
        )
        asking = asyncio.create_task(client.send_request(request, timeout=10))
        await asyncio.wait_for(Sleeper.started.wait(), timeout=10)

        await send_cancel(client, request.message_id)

        with pytest.raises(RemoteError) as raised:
            await asking
    assert raised.value.code == "cancelled"
    assert Sleeper.causes == [CancelCause.REQUEST]
    assert Sleeper.messages == ["cancelled by request"]


async def test_a_cancellation_without_a_cause_has_none() -> None:
    """A task cancelled with no message, or with another one, carries no CancelCause."""
    assert cancel_cause(asyncio.CancelledError()) is None
    assert cancel_cause(asyncio.CancelledError("cancelled by request")) is None
    assert cancel_cause(asyncio.CancelledError(CancelCause.REQUEST)) is CancelCause.REQUEST


async def test_a_cancel_that_cannot_be_sent_is_logged_not_raised() -> None:
    """send_cancel on a closed bus says so on the logger it is given, and returns."""
    bus = MemoryBus(MemoryBroker(), agent_id="asker")
    log = Logged()

    await send_cancel(bus, "m-1", holder="worker-1", log=log)

    [(event, fields)] = log.lines
    assert event == "cancel not sent"
    assert fields["message_id"] == "m-1"
