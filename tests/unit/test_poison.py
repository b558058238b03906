"""Poison requests on classic service queues: redeliveries counted in a header, then refused."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from agentbus import ConnectionLost, Metrics, RemoteError, Settings
from agentbus.bus._delivery import IncomingMessage
from agentbus.bus._poison import ATTEMPT_HEADER
from agentbus.envelopes import RequestEnvelope, RequestPayload, encode
from agentbus.testing import MemoryBroker, MemoryBus, MemoryDelivery, MemoryMessage
from agentbus.testing._publisher import MemoryPublisher

CLASSIC = Settings(delivery_limit=2)


class Crashing:
    """A handler whose consumer dies on its first ``crashes`` calls (all, with None).

    Raising ``CancelledError`` is what a closing channel does to a running handler: the
    delivery goes back to the queue, flagged as redelivered, as after a worker crash.
    """

    def __init__(self, crashes: int | None = None) -> None:
        self.crashes = crashes
        self.calls = 0

    async def __call__(self, request: RequestEnvelope) -> str:
        self.calls += 1
        if self.crashes is None or self.calls <= self.crashes:
            raise asyncio.CancelledError
        return "done"


def _published(client: MemoryBus, headers: Mapping[str, object]) -> MemoryMessage:
    request = RequestEnvelope(
        sender_id=client.agent_id, receiver_id="svc", payload=RequestPayload(action="go")
    )
    return MemoryMessage(
        encode(request), message_id=request.message_id, type="request", headers=headers
    )


async def test_a_request_that_keeps_killing_its_consumer_is_dead_lettered_after_the_limit() -> None:
    """Limit 2: three runs (as x-delivery-limit), then an error reply and a dead letter."""
    broker = MemoryBroker()
    handler = Crashing()
    metrics = Metrics()
    async with MemoryBus(broker, CLASSIC, agent_id="svc-1") as server, MemoryBus(broker) as client:
        metrics.attach(server)
        await server.serve(handler, service="svc")
        with pytest.raises(RemoteError) as raised:
            await client.request("svc", "go", timeout=5)
        await broker.idle()

    error = raised.value.envelope.payload
    assert error.code == "processing_failed"
    assert error.message == "gave up after 3 deliveries: the request kept failing its consumer"
    assert error.details == {"attempts": 3, "limit": 2}
    assert handler.calls == 3, "not run on the delivery that was refused"
    assert server.stats.consumed_by[("request", "republished")] == 2
    assert server.stats.poison_dead_lettered == 1
    assert server.stats.dead_lettered == 1
    [letter] = broker.dead_letters
    assert letter.message.message_id == raised.value.envelope.correlation_id
    assert letter.message.headers == {ATTEMPT_HEADER: 3}
    sample = metrics.registry.get_sample_value(
        "agentbus_poison_dead_lettered_total", {"agent_id": "svc-1"}
    )
    assert sample == 1


@pytest.mark.parametrize(
    ("headers", "runs"),
    [({}, 3), ({ATTEMPT_HEADER: 1}, 3), ({ATTEMPT_HEADER: 2}, 2), ({ATTEMPT_HEADER: 3}, 1)],
)
async def test_each_redelivery_is_republished_one_attempt_further_without_running(
    headers: dict[str, int], runs: int
) -> None:
    """A redelivery is republished with the attempt header plus one, other headers kept."""
    broker = MemoryBroker()
    handler = Crashing()
    async with MemoryBus(broker, CLASSIC, agent_id="svc-1") as server, MemoryBus(broker) as client:
        await server.serve(handler, service="svc")
        message = _published(client, {"trace": "t-1", **headers})
        broker.publish(message, "agent.svc.request", exchange=server.topology.exchange)
        await broker.idle()

    assert handler.calls == runs
    assert server.stats.consumed_by[("request", "republished")] == runs - 1
    assert [letter.message.headers for letter in broker.dead_letters] == [
        {"trace": "t-1", ATTEMPT_HEADER: 3}
    ]
    assert client.stats.consumed_by[("error", "unknown")] == 1, "the requester was told"


async def test_a_request_that_recovers_is_answered_from_its_republished_copy() -> None:
    """One crash, then success: one republish, one answer, nothing dead-lettered."""
    broker = MemoryBroker()
    handler = Crashing(crashes=1)
    async with MemoryBus(broker, CLASSIC, agent_id="svc-1") as server, MemoryBus(broker) as client:
        await server.serve(handler, service="svc")
        reply = await client.request("svc", "go", timeout=5)

    assert reply.result == "done"
    assert handler.calls == 2
    assert server.stats.consumed_by[("request", "republished")] == 1
    assert broker.dead_letters == []


async def test_a_first_delivery_runs_whatever_its_attempt_header_says() -> None:
    """Only a redelivery is counted: a fresh delivery is served, even past the limit."""
    broker = MemoryBroker()
    handler = Crashing(crashes=0)
    async with MemoryBus(broker, CLASSIC, agent_id="svc-1") as server, MemoryBus(broker) as client:
        await server.serve(handler, service="svc")
        message = _published(client, {ATTEMPT_HEADER: 99})
        broker.publish(message, "agent.svc.request", exchange=server.topology.exchange)
        await broker.idle()

    assert handler.calls == 1
    assert server.stats.requests_served == 1
    assert broker.dead_letters == []


@pytest.mark.parametrize(
    "settings",
    [Settings(queue_type="quorum", delivery_limit=1), Settings(delivery_limit=1)],
    ids=["quorum", "instance-queue"],
)
async def test_quorum_queues_and_instance_queues_are_not_counted(settings: Settings) -> None:
    """The quorum queue counts for itself; an instance queue is not shared: both unchanged."""
    broker = MemoryBroker()
    handler = Crashing(crashes=2)
    async with MemoryBus(broker, settings, agent_id="svc-1") as server, MemoryBus(broker) as client:
        await server.serve(handler, service="svc")
        receiver = "svc" if settings.queue_type == "quorum" else "svc-1"
        reply = await client.request(receiver, "go", timeout=5)

    assert reply.result == "done"
    assert handler.calls == 3, "past the classic limit of 1, still run"
    assert server.stats.consumed_by[("request", "republished")] == 0
    assert server.stats.poison_dead_lettered == 0


async def test_a_failed_republish_requeues_the_delivery_and_nothing_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The republish is refused once: the delivery goes back, is counted again, and served."""
    broker = MemoryBroker()
    handler = Crashing(crashes=1)
    republish = MemoryPublisher.republish
    failures: list[int] = []

    async def failing_once(
        self: MemoryPublisher, message: IncomingMessage, headers: Mapping[str, int]
    ) -> None:
        if not failures:
            failures.append(headers[ATTEMPT_HEADER])
            raise ConnectionLost("injected")
        await republish(self, message, headers)

    monkeypatch.setattr(MemoryPublisher, "republish", failing_once)
    async with MemoryBus(broker, CLASSIC, agent_id="svc-1") as server, MemoryBus(broker) as client:
        await server.serve(handler, service="svc")
        reply = await client.request("svc", "go", timeout=5)

    assert reply.result == "done"
    assert failures == [2]
    assert handler.calls == 2, "not run on the delivery whose republish failed"
    assert server.stats.consumed_by[("request", "republished")] == 1
    assert broker.dead_letters == []


async def test_a_copy_that_comes_back_first_waits_until_its_original_is_acked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Were the copy to crash the process before the ack, the original would come back too."""
    broker = MemoryBroker()
    republish = MemoryPublisher.republish
    originals: list[MemoryDelivery] = []
    settled_when_run: list[bool] = []

    async def slow_ack(
        self: MemoryPublisher, message: IncomingMessage, headers: Mapping[str, int]
    ) -> None:
        assert isinstance(message, MemoryDelivery)
        originals.append(message)
        await republish(self, message, headers)
        for _ in range(5):  # the copy is delivered, and would run, before the ack
            await asyncio.sleep(0)

    async def handler(request: RequestEnvelope) -> str:
        if not originals:
            raise asyncio.CancelledError
        settled_when_run.append(originals[0].is_settled)
        return "done"

    monkeypatch.setattr(MemoryPublisher, "republish", slow_ack)
    async with MemoryBus(broker, CLASSIC, agent_id="svc-1") as server, MemoryBus(broker) as client:
        await server.serve(handler, service="svc")
        reply = await client.request("svc", "go", timeout=5)

    assert reply.result == "done"
    assert settled_when_run == [True]


async def test_a_republish_cut_short_does_not_hold_the_next_delivery_of_its_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A channel closing mid-republish requeues the original; its next delivery still runs."""
    broker = MemoryBroker()
    handler = Crashing(crashes=1)
    republish = MemoryPublisher.republish
    cut: list[int] = []

    async def cut_once(
        self: MemoryPublisher, message: IncomingMessage, headers: Mapping[str, int]
    ) -> None:
        if not cut:
            cut.append(headers[ATTEMPT_HEADER])
            raise asyncio.CancelledError
        await republish(self, message, headers)

    monkeypatch.setattr(MemoryPublisher, "republish", cut_once)
    async with MemoryBus(broker, CLASSIC, agent_id="svc-1") as server, MemoryBus(broker) as client:
        await server.serve(handler, service="svc")
        reply = await client.request("svc", "go", timeout=5)

    assert reply.result == "done"
    assert cut == [2]
    assert handler.calls == 2
    assert broker.dead_letters == []
