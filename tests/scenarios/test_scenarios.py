"""Scenarios every transport must pass alike: the in-memory bus and the bus on RabbitMQ."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from scenario_support import TransportFactory

from agentbus import (
    BusClosed,
    NoInstance,
    PayloadTooLarge,
    RemoteError,
    RequestEnvelope,
    RequestTimeout,
    Unroutable,
)
from agentbus.envelopes import BROADCAST, EventEnvelope, RequestPayload
from support.waiting import wait_until


async def echo(request: RequestEnvelope) -> dict[str, Any]:
    return {"echo": request.payload.parameters, "action": request.payload.action}


async def test_request_gets_the_correlated_response(transport: TransportFactory) -> None:
    """A request to a service gets the handler's result, correlated to the request."""
    server = await transport("echo-1")
    await server.serve(echo, service="echo")
    client = await transport()
    request = RequestEnvelope(
        sender_id=client.agent_id,
        receiver_id="echo",
        payload=RequestPayload(action="say", parameters={"text": "hi"}),
    )

    reply = await client.send_request(request, timeout=10)

    assert reply.result == {"echo": {"text": "hi"}, "action": "say"}
    assert reply.correlation_id == request.message_id
    assert (reply.sender_id, reply.receiver_id) == ("echo-1", client.agent_id)
    assert client.in_flight == 0
    assert client.stats.replies_matched == 1
    # The reply can reach the client before the server has the broker's confirm of it.
    await wait_until(lambda: server.stats.requests_served == 1)


async def test_handler_error_is_answered_with_processing_failed(
    transport: TransportFactory,
) -> None:
    """A handler exception reaches the caller as RemoteError processing_failed; serving goes on."""

    async def fragile(request: RequestEnvelope) -> str:
        if request.payload.action == "boom":
            raise ValueError("no good")
        return "fine"

    server = await transport()
    await server.serve(fragile, service="fragile")
    client = await transport()

    with pytest.raises(RemoteError) as caught:
        await client.request("fragile", "boom", timeout=10)
    after = await client.request("fragile", "ok", timeout=10)

    assert caught.value.code == "processing_failed"
    assert "ValueError: no good" in caught.value.message
    assert after.result == "fine"
    assert server.stats.handler_errors == 1


async def test_request_to_nobody_is_unroutable_at_once(transport: TransportFactory) -> None:
    """A request nobody is bound for raises Unroutable at once, not after its 60 s timeout."""
    client = await transport()

    async with asyncio.timeout(10):
        with pytest.raises(Unroutable) as caught:
            await client.request("nobody-home", "anything", timeout=60)

    assert caught.value.code == "agent_unavailable"
    assert client.in_flight == 0
    assert client.stats.published == 0


async def test_timeout_raises_and_the_late_reply_is_counted(transport: TransportFactory) -> None:
    """No answer in time raises RequestTimeout; the answer that comes later is counted late."""
    release = asyncio.Event()

    async def slow(request: RequestEnvelope) -> str:
        await release.wait()
        return "too late"

    server = await transport()
    await server.serve(slow, service="slow")
    client = await transport()

    with pytest.raises(RequestTimeout) as caught:
        await client.request("slow", "work", timeout=0.3)
    assert client.in_flight == 0
    release.set()

    await wait_until(lambda: client.stats.late_replies == 1)
    assert caught.value.code == "timeout"
    assert client.stats.replies_matched == 0


async def test_progress_replies_reach_the_callback_before_the_answer(
    transport: TransportFactory,
) -> None:
    """In-progress responses go to on_progress; the final response ends the request."""
    server = await transport()
    progress: list[Any] = []

    async def long_job(request: RequestEnvelope) -> str:
        for pct in (25, 75):
            update = request.response({"pct": pct}, sender_id=server.agent_id, status="in_progress")
            await server.publish(update)
        return "done"

    await server.serve(long_job, service="jobs")
    client = await transport()
    request = RequestEnvelope(
        sender_id=client.agent_id, receiver_id="jobs", payload=RequestPayload(action="run")
    )

    reply = await client.send_request(
        request, timeout=10, on_progress=lambda update: progress.append(update.result)
    )

    assert reply.result == "done"
    assert progress == [{"pct": 25}, {"pct": 75}]
    assert client.stats.progress_replies == 2


async def test_oversized_messages_are_refused_on_both_sides(transport: TransportFactory) -> None:
    """Without passing by reference (``artifact_by_reference`` off): an oversized request
    raises PayloadTooLarge unsent; an oversized result is an error reply."""

    async def bloated(request: RequestEnvelope) -> str:
        return "x" * 4096

    server = await transport(max_message_size=2048, artifact_by_reference=False)
    await server.serve(bloated, service="bloated")
    client = await transport(max_message_size=2048, artifact_by_reference=False)

    with pytest.raises(PayloadTooLarge):
        await client.request("bloated", "in", {"pad": "x" * 4096}, timeout=10)
    with pytest.raises(RemoteError) as caught:
        await client.request("bloated", "out", timeout=10)

    assert client.stats.published == 1
    assert caught.value.code == "payload_too_large"


async def test_broadcast_event_reaches_each_subscriber_once(transport: TransportFactory) -> None:
    """One broadcast event is received exactly once by each of N subscribers."""
    inboxes: dict[str, list[EventEnvelope]] = {}
    for n in range(4):
        bus = await transport(f"listener-{n}")
        inbox = inboxes.setdefault(bus.agent_id, [])

        async def on_news(event: EventEnvelope, inbox: list[EventEnvelope] = inbox) -> None:
            inbox.append(event)

        await bus.subscribe("broadcast.event.news", on_news)
    sender = await transport()

    sent = await sender.emit("news", {"headline": "agents unite"})
    fence = await sender.emit("news", {"headline": "fence"})

    await wait_until(lambda: all(len(inbox) == 2 for inbox in inboxes.values()))
    for inbox in inboxes.values():
        assert [event.message_id for event in inbox] == [sent.message_id, fence.message_id]
        assert inbox[0].payload.event_data == {"headline": "agents unite"}


async def test_competing_consumers_share_a_service(transport: TransportFactory) -> None:
    """Two instances of one service with prefetch 1 each serve part of 40 requests, each once."""
    served: Counter[str] = Counter()

    def handler_for(agent_id: str) -> Any:
        async def handler(request: RequestEnvelope) -> str:
            served[agent_id] += 1
            await asyncio.sleep(0.01)  # simulated work, so the other instance gets a turn
            return agent_id

        return handler

    for agent_id in ("pool-a", "pool-b"):
        bus = await transport(agent_id)
        await bus.serve(handler_for(agent_id), service="pool", prefetch=1)
    client = await transport()

    replies = await asyncio.gather(*(client.request("pool", "w", timeout=20) for _ in range(40)))

    by_sender = Counter(reply.sender_id for reply in replies)
    assert sum(served.values()) == 40
    assert by_sender == served
    assert served["pool-a"] > 0
    assert served["pool-b"] > 0


TOPIC_SUBSCRIPTIONS = {
    "broadcast.event.*": {"news", "weather"},
    "broadcast.#": {"news", "weather"},
    "broadcast.event.news": {"news"},
    "#": {"news", "weather", "ping"},
    "broadcast.event.news.#": {"news"},  # `#` matching zero words
    "#.news": {"news"},
    "*.event.news": {"news"},
    "*.*.event": {"ping"},
    "broadcast.*": set(),  # `*` is one word, never two
    "broadcast.event.news.*": set(),
}


async def test_topic_patterns_receive_exactly_what_amqp_routes(
    transport: TransportFactory,
) -> None:
    """Subscribers get exactly the events whose routing keys AMQP matches to their pattern."""
    received: dict[str, list[str]] = {pattern: [] for pattern in TOPIC_SUBSCRIPTIONS}
    fenced: set[str] = set()
    subscribers = []
    for n, pattern in enumerate(TOPIC_SUBSCRIPTIONS):
        bus = await transport(f"sub-{n}")
        subscribers.append(bus)

        async def record(event: EventEnvelope, inbox: list[str] = received[pattern]) -> None:
            if event.payload.event_name != "fence":
                inbox.append(event.payload.event_name)

        async def fence(event: EventEnvelope, agent_id: str = bus.agent_id) -> None:
            fenced.add(agent_id)

        await bus.subscribe(pattern, record)
        await bus.subscribe(f"agent.{bus.agent_id}.event", fence)
    sender = await transport()

    await sender.emit("news")  # broadcast.event.news
    await sender.emit("weather")  # broadcast.event.weather
    await sender.emit("ping", receiver="somebody")  # agent.somebody.event
    # A queue delivers in publish order: once each subscriber has its fence, it has the rest.
    for bus in subscribers:
        await sender.emit("fence", receiver=bus.agent_id)

    await wait_until(lambda: len(fenced) == len(subscribers))
    assert {pattern: set(names) for pattern, names in received.items()} == TOPIC_SUBSCRIPTIONS
    assert all(len(names) == len(set(names)) for names in received.values())


async def test_broadcast_request_action_reaches_every_instance(
    transport: TransportFactory,
) -> None:
    """A request broadcast for an action is run by each instance that serves it as broadcast."""
    ran: list[str] = []

    def handler_for(agent_id: str) -> Any:
        async def handler(request: RequestEnvelope) -> str:
            ran.append(agent_id)
            return agent_id

        return handler

    for agent_id, actions in (("idx-1", ["reindex"]), ("idx-2", ["reindex"]), ("idx-3", [])):
        bus = await transport(agent_id)
        await bus.serve(handler_for(agent_id), service="indexer", broadcast_actions=actions)
    client = await transport()
    request = RequestEnvelope(
        sender_id=client.agent_id,
        receiver_id=BROADCAST,
        payload=RequestPayload(action="reindex"),
    )

    reply = await client.send_request(request, timeout=10)

    # The first answer resolves the request; the other instance's answer comes unclaimed.
    await wait_until(lambda: client.stats.unknown_replies == 1)
    assert sorted(ran) == ["idx-1", "idx-2"]
    assert reply.sender_id in {"idx-1", "idx-2"}


async def test_duplicate_message_id_runs_once(transport: TransportFactory) -> None:
    """Copies of one request (same message_id) run the handler once; a late copy is re-answered."""
    started = asyncio.Event()
    release = asyncio.Event()
    runs: list[str] = []

    async def charge(request: RequestEnvelope) -> str:
        runs.append(request.message_id)
        started.set()
        await release.wait()
        return "charged"

    server = await transport()
    await server.serve(charge, service="billing")
    client = await transport()
    request = RequestEnvelope(
        sender_id=client.agent_id,
        receiver_id="billing",
        payload=RequestPayload(action="charge", parameters={"cents": 100}),
    )

    await client.publish(request)  # a first copy, as a redelivery would bring it
    await started.wait()
    waiting = asyncio.create_task(client.send_request(request, timeout=10))
    await wait_until(lambda: server.stats.duplicates == 1)  # the running one will answer
    release.set()
    reply = await waiting
    await client.publish(request)  # a copy after the work finished: answered from memory
    await wait_until(lambda: client.stats.unknown_replies == 1)

    assert runs == [request.message_id]
    assert reply.result == "charged"
    assert reply.correlation_id == request.message_id
    assert server.stats.duplicates == 2


async def test_expired_request_is_answered_timeout_without_running(
    transport: TransportFactory,
) -> None:
    """A request whose deadline passed before it is served is answered timeout, not run."""
    runs = 0

    async def handler(request: RequestEnvelope) -> None:
        nonlocal runs
        runs += 1

    server = await transport()
    await server.serve(handler, service="punctual")
    client = await transport()
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
    assert server.stats.expired_requests == 1


async def test_close_drains_in_flight_work(transport: TransportFactory) -> None:
    """Closing a serving bus lets the running handler finish and answer before it closes."""
    started = asyncio.Event()
    release = asyncio.Event()

    async def handler(request: RequestEnvelope) -> str:
        started.set()
        await release.wait()
        return "finished"

    server = await transport(shutdown_grace=10)
    await server.serve(handler, service="drainer")
    client = await transport()
    pending = asyncio.create_task(client.request("drainer", "go", timeout=20))
    await started.wait()

    closing = asyncio.create_task(server.aclose())
    await wait_until(lambda: not server.is_open)
    release.set()
    await closing
    reply = await pending

    assert reply.result == "finished"
    assert not closing.cancelled()
    with pytest.raises(BusClosed):
        await server.request("drainer", "go")


async def test_close_requeues_unfinished_work_to_another_instance(
    transport: TransportFactory,
) -> None:
    """Work still running when the grace period ends is requeued and served by another instance."""
    started = asyncio.Event()

    async def stuck(request: RequestEnvelope) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    async def healthy(request: RequestEnvelope) -> str:
        return "rescued"

    first = await transport("first", shutdown_grace=0.2)
    await first.serve(stuck, service="relay", prefetch=1)
    client = await transport()
    pending = asyncio.create_task(client.request("relay", "go", timeout=20))
    await started.wait()
    second = await transport("second")
    await second.serve(healthy, service="relay", prefetch=1)

    await first.aclose()
    reply = await pending

    assert (reply.result, reply.sender_id) == ("rescued", "second")
    assert first.stats.requests_served == 0


async def test_close_fails_pending_requests(transport: TransportFactory) -> None:
    """Requests still waiting when their bus closes fail with BusClosed, none left pending."""

    async def never(request: RequestEnvelope) -> None:
        await asyncio.Event().wait()

    server = await transport(shutdown_grace=0)
    await server.serve(never, service="blackhole")
    client = await transport()
    waiting = [asyncio.create_task(client.request("blackhole", "x", timeout=30)) for _ in range(3)]
    await wait_until(lambda: client.in_flight == 3 and client.stats.published == 3)

    await client.aclose()

    for task in waiting:
        with pytest.raises(BusClosed):
            await task
    assert client.in_flight == 0


async def test_a_draining_handler_can_still_make_requests(transport: TransportFactory) -> None:
    """While its bus drains, a running handler's own requests are still answered."""
    started = asyncio.Event()
    release = asyncio.Event()
    helper = await transport("helper-1")
    await helper.serve(echo, service="helper")
    worker = await transport("worker-1", shutdown_grace=10)

    async def delegating(request: RequestEnvelope) -> Any:
        started.set()
        await release.wait()
        reply = await worker.request("helper", "assist", {"n": 1}, timeout=10)
        return reply.result

    await worker.serve(delegating, service="delegator")
    client = await transport()
    pending = asyncio.create_task(client.request("delegator", "go", timeout=20))
    await started.wait()

    closing = asyncio.create_task(worker.aclose())
    await wait_until(lambda: worker.state.value == "closing")
    release.set()
    reply = await pending
    await closing

    assert reply.result == {"echo": {"n": 1}, "action": "assist"}


async def test_direct_request_to_a_draining_instance_is_refused(
    transport: TransportFactory,
) -> None:
    """A request sent to a draining instance by id gets agent_unavailable, not silence."""
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(request: RequestEnvelope) -> str:
        started.set()
        await release.wait()
        return "done"

    worker = await transport("worker-2", shutdown_grace=10)
    await worker.serve(slow, service="slowpoke")
    client = await transport()
    first = asyncio.create_task(client.request("slowpoke", "go", timeout=20))
    await started.wait()
    draining = asyncio.create_task(worker.drain())
    await wait_until(lambda: worker.state.value == "closing")

    with pytest.raises(RemoteError) as caught:
        await client.request("worker-2", "go", timeout=10)
    release.set()
    await draining

    assert caught.value.code == "agent_unavailable"
    assert (await first).result == "done"


async def test_a_service_with_no_instance_running_fails_fast(transport: TransportFactory) -> None:
    """Its queue outlives its instances: a request fails with NoInstance after the check."""
    server = await transport("gone-1")
    await server.serve(echo, service="gone")
    await server.aclose()
    client = await transport(presence_check=0.2)

    began = asyncio.get_running_loop().time()
    with pytest.raises(NoInstance, match="no instance of 'gone' is running"):
        await client.request("gone", "say", timeout=30)
    print(f"\nno instance: failed after {asyncio.get_running_loop().time() - began:.3f} s")
    assert client.stats.no_instance == 1
