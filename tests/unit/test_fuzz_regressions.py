"""Inputs the fuzzers found: each is handled with a clear error, and serving goes on."""

from __future__ import annotations

import pytest
from orjson import dumps

from agentbus import Agent, RemoteError, Settings, skill
from agentbus.envelopes import EnvelopeError, decode
from agentbus.testing import MemoryBroker, MemoryBus, MemoryMessage


class Adder(Agent):
    name = "adder"

    @skill
    async def add(self, a: int, b: int) -> int:
        return a + b


async def test_message_type_that_is_an_object_is_dead_lettered_and_serving_goes_on() -> None:
    """A body like {"message_type": {}} is refused and settled; the consumer is not stalled."""
    broker = MemoryBroker()
    settings = Settings(exchange="fuzz")
    async with (
        MemoryBus(broker, settings, agent_id="adder-1") as bus,
        Adder(agent_id="adder-1", bus=bus, settings=settings, concurrency=1),
        MemoryBus(broker, settings, agent_id="asker") as client,
    ):
        for body in (b'{"message_type":{}}', b'{"message_type":[1]}'):
            broker.publish(MemoryMessage(body), "agent.adder.request", exchange="fuzz")
        await broker.idle()
        reply = await client.request("adder", "add", {"a": 1, "b": 2}, timeout=5)

    assert reply.result == 3
    assert len(broker.dead_letters) == 2


async def test_a_result_that_cannot_be_encoded_is_a_processing_failure() -> None:
    """A result over 64 bits is answered processing_failed, not invalid_envelope."""
    broker = MemoryBroker()
    settings = Settings()
    async with (
        MemoryBus(broker, settings, agent_id="adder-1") as bus,
        Adder(agent_id="adder-1", bus=bus, settings=settings),
        MemoryBus(broker, settings, agent_id="asker") as client,
    ):
        with pytest.raises(RemoteError) as caught:
            await client.request("adder", "add", {"a": 2**64 - 2, "b": 3}, timeout=5)

    assert caught.value.code == "processing_failed"
    assert "cannot be sent" in caught.value.message


def test_a_huge_protocol_version_is_quoted_briefly() -> None:
    """The error for a 400,000-character version stays short enough to be sent back."""
    body = dumps({"protocol_version": "\\" * 400_000})
    with pytest.raises(EnvelopeError) as caught:
        decode(body)
    assert len(caught.value.message) < 200
