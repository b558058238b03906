"""The bus on a real RabbitMQ: requests, timeouts, broadcast, competing consumers, closing."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from helpers import BusFactory, wait_until

from agentbus import (
    BusClosed,
    ConfigurationError,
    RemoteError,
    RequestEnvelope,
    RequestTimeout,
    Unroutable,
)
from agentbus.envelopes import EventEnvelope, RequestPayload


async def echo(request: RequestEnvelope) -> dict[str, Any]:
    return {"echo": request.payload.parameters, "action": request.payload.action}


async def test_request_gets_the_correlated_response(make_bus: BusFactory) -> None:
    """A request to a service gets the handler's result, correlated by message id."""
    server = await make_bus("echo-1")
    await server.serve(echo, service="echo")
    client = await make_bus()
    request = RequestEnvelope(
        sender_id=client.agent_id,
        receiver_id="echo",
        payload=RequestPayload(action="say", parameters={"text": "hi"}),
    )

    reply = await client.send_request(request, timeout=10)

    assert reply.result == {"echo": {"text": "hi"}, "action": "say"}
    assert reply.correlation_id == request.message_id
    assert reply.sender_id == "echo-1"
    assert reply.receiver_id == client.agent_id
    assert client.in_flight == 0


async def test_request_to_an_instance_id_reaches_that_instance(make_bus: BusFactory) -> None:
    """A request addressed to an instance id is served by that instance."""
    server = await make_bus("only-me")
    await server.serve(echo)
    client = await make_bus()

    reply = await client.request("only-me", "ping", timeout=10)

    assert reply.sender_id == "only-me"


async def test_handler_error_becomes_an_error_envelope(make_bus: BusFactory) -> None:
    """A handler exception is answered with processing_failed; the consumer keeps serving."""

    async def handler(request: RequestEnvelope) -> str:
        if request.payload.action == "boom":
            raise ValueError("no good")
        return "fine"

    server = await make_bus()
    await server.serve(handler, service="fragile")
    client = await make_bus()

    with pytest.raises(RemoteError) as caught:
        await client.request("fragile", "boom", timeout=10)
    after = await client.request("fragile", "ok", timeout=10)

    assert caught.value.code == "processing_failed"
    assert "no good" in caught.value.message
    assert after.result == "fine"


async def test_hundred_concurrent_requests_with_mixed_timeouts_end_once(
    make_bus: BusFactory,
) -> None:
    """100 requests in flight at once each end exactly once: a reply or a timeout."""
    release = asyncio.Event()

    async def handler(request: RequestEnvelope) -> int:
        if request.payload.parameters["slow"]:
            await release.wait()
        return int(request.payload.parameters["i"])

    server = await make_bus(prefetch=200)
    await server.serve(handler, service="mixed", prefetch=200)
    client = await make_bus()

    async def one(i: int) -> str:
        slow = i % 2 == 1
        try:
            reply = await client.request(
                "mixed", "work", {"i": i, "slow": slow}, timeout=0.5 if slow else 20
            )
        except RequestTimeout:
            return "timeout"
        assert reply.result == i
        return "reply"

    outcomes = await asyncio.gather(*(one(i) for i in range(100)))
    release.set()

    assert Counter(outcomes) == {"reply": 50, "timeout": 50}
    assert client.in_flight == 0
    # The slow ones are answered after their requesters gave up: dropped and counted.
    await wait_until(lambda: client.stats.late_replies == 50, timeout=20)
    assert client.stats.replies_matched == 50
    assert client.stats.unknown_replies == 0


async def test_broadcast_event_reaches_every_subscriber(make_bus: BusFactory) -> None:
    """One broadcast event is received once by each of N subscribers."""
    received: dict[str, list[EventEnvelope]] = {}
    subscribers = [await make_bus(f"listener-{n}") for n in range(4)]
    for bus in subscribers:
        inbox = received.setdefault(bus.agent_id, [])

        async def on_news(event: EventEnvelope, inbox: list[EventEnvelope] = inbox) -> None:
            inbox.append(event)

        await bus.subscribe("broadcast.event.news", on_news)
    sender = await make_bus()

    sent = await sender.emit("news", {"headline": "agents unite"})

    await wait_until(lambda: all(len(inbox) >= 1 for inbox in received.values()))
    assert set(received) == {f"listener-{n}" for n in range(4)}
    for inbox in received.values():
        assert [event.message_id for event in inbox] == [sent.message_id]
        assert inbox[0].payload.event_data == {"headline": "agents unite"}


async def test_competing_consumers_share_a_service_queue(make_bus: BusFactory) -> None:
    """Two instances of one service both serve part of 40 requests, each request once."""
    served: Counter[str] = Counter()

    def handler_for(agent_id: str) -> Any:
        async def handler(request: RequestEnvelope) -> str:
            served[agent_id] += 1
            await asyncio.sleep(0.02)  # simulated work, so both instances get a share
            return agent_id

        return handler

    for agent_id in ("pool-a", "pool-b"):
        bus = await make_bus(agent_id)
        await bus.serve(handler_for(agent_id), service="pool", prefetch=1)
    client = await make_bus()

    replies = await asyncio.gather(*(client.request("pool", "w", timeout=20) for _ in range(40)))

    by_sender = Counter(reply.sender_id for reply in replies)
    assert sum(served.values()) == 40
    assert by_sender == served
    assert served["pool-a"] > 0
    assert served["pool-b"] > 0


async def test_request_to_a_service_nobody_serves_fails_at_once(make_bus: BusFactory) -> None:
    """A request nobody is bound for raises Unroutable, not a timeout, even with a long timeout."""
    client = await make_bus()

    async with asyncio.timeout(10):  # far below the request's own 60 s timeout
        with pytest.raises(Unroutable) as caught:
            await client.request("nobody-home", "anything", timeout=60)

    assert caught.value.code == "agent_unavailable"
    assert client.in_flight == 0


async def test_expired_request_is_answered_with_timeout(make_bus: BusFactory) -> None:
    """A request whose deadline passed before it is served is not run."""
    runs = 0

    async def handler(request: RequestEnvelope) -> None:
        nonlocal runs
        runs += 1

    server = await make_bus()
    await server.serve(handler, service="punctual")
    client = await make_bus()
    request = RequestEnvelope.model_validate(
        {
            "sender_id": client.agent_id,
            "receiver_id": "punctual",
            "payload": {"action": "late"},
            "metadata": {"deadline": "2000-01-01T00:00:00Z"},
        }
    )

    with pytest.raises(RemoteError) as caught:
        await client.send_request(request, timeout=10)

    assert caught.value.code == "timeout"
    assert runs == 0


async def test_close_drains_in_flight_work(make_bus: BusFactory) -> None:
    """Closing a serving bus lets the running handler finish and answer before it closes."""
    started = asyncio.Event()
    release = asyncio.Event()

    async def handler(request: RequestEnvelope) -> str:
        started.set()
        await release.wait()
        return "finished"

    server = await make_bus(shutdown_grace=10)
    await server.serve(handler, service="drainer")
    client = await make_bus()
    pending = asyncio.create_task(client.request("drainer", "go", timeout=20))
    await started.wait()

    closing = asyncio.create_task(server.aclose())
    await wait_until(lambda: server.state.value == "closing")
    release.set()
    await closing
    reply = await pending

    assert reply.result == "finished"
    assert server.state.value == "closed"
    with pytest.raises(BusClosed):
        await server.request("drainer", "go")


async def test_close_fails_pending_requests(make_bus: BusFactory) -> None:
    """Requests still waiting when their bus closes fail with BusClosed, none left pending."""

    async def never(request: RequestEnvelope) -> None:
        await asyncio.Event().wait()

    server = await make_bus(shutdown_grace=0)
    await server.serve(never, service="blackhole")
    client = await make_bus()
    waiting = [asyncio.create_task(client.request("blackhole", "x", timeout=30)) for _ in range(3)]
    await wait_until(lambda: client.in_flight == 3 and client.stats.published == 3)

    await client.aclose()

    for task in waiting:
        with pytest.raises(BusClosed):
            await task
    assert client.in_flight == 0


async def test_invalid_service_name_is_refused(make_bus: BusFactory) -> None:
    """A service name outside the id grammar is a ConfigurationError, nothing declared."""
    bus = await make_bus()

    with pytest.raises(ConfigurationError):
        await bus.serve(echo, service="has.dot")
