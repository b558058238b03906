"""Failing fast when nobody is there: a queue without consumers fails its request early."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from agentbus import NoInstance, RequestTimeout, Settings, Unroutable
from agentbus.bus._pending import PendingRequests
from agentbus.bus._requests import Requester
from agentbus.bus._stats import BusStats
from agentbus.envelopes import RequestEnvelope
from agentbus.testing import MemoryBroker, MemoryBus

QUICK = Settings(presence_check=0.1)


async def _served_then_gone(broker: MemoryBroker, service: str = "svc") -> None:
    """Serve ``service`` once (its queue stays) and stop: the queue has no consumer now."""

    async def echo(request: RequestEnvelope) -> str:
        return "ok"

    async with MemoryBus(broker, QUICK, agent_id=f"{service}-1") as server:
        await server.serve(echo, service=service)


async def test_a_service_whose_instances_are_gone_fails_with_no_instance_not_a_timeout() -> None:
    """Its queue is there, nothing consumes it: NoInstance (agent_unavailable), long before 30 s."""
    broker = MemoryBroker()
    await _served_then_gone(broker)
    async with MemoryBus(broker, QUICK) as client:
        with pytest.raises(NoInstance) as raised:
            await client.request("svc", "go", timeout=30)
    assert isinstance(raised.value, Unroutable)
    assert raised.value.code == "agent_unavailable"
    assert "no instance of 'svc' is running" in str(raised.value)
    assert client.stats.no_instance == 1


async def test_an_instance_that_has_gone_fails_the_same_way() -> None:
    """A request to an agent id whose queue outlives it (x-expires) fails fast too."""
    broker = MemoryBroker()
    await _served_then_gone(broker)
    async with MemoryBus(broker, QUICK) as client:
        with pytest.raises(NoInstance, match="no instance of 'svc-1'"):
            await client.request("svc-1", "go", timeout=30)


async def test_a_slow_answer_from_a_live_instance_is_waited_for() -> None:
    """Past the check, a consumer is there: the request keeps waiting and is answered."""
    broker = MemoryBroker()

    async def slow(request: RequestEnvelope) -> str:
        await asyncio.sleep(0.3)  # the handler's own work, past the 0.1 s check
        return "done"

    async with MemoryBus(broker, QUICK) as server, MemoryBus(broker, QUICK) as client:
        await server.serve(slow, service="svc")
        reply = await client.request("svc", "go", timeout=5)
    assert reply.result == "done"
    assert client.stats.no_instance == 0


async def test_a_request_taken_by_an_instance_that_then_drains_is_waited_for() -> None:
    """Delivered, then its consumer cancelled (a drain): no consumer, but nothing waits there."""
    broker = MemoryBroker()
    taken = asyncio.Event()
    finish = asyncio.Event()

    async def held(request: RequestEnvelope) -> str:
        taken.set()
        await finish.wait()
        return "finished while draining"

    async with MemoryBus(broker, QUICK) as server, MemoryBus(broker, QUICK) as client:
        looked: list[bool] = []
        look = client._unserved

        async def recorded(receiver: str) -> bool:
            looked.append(await look(receiver))
            return looked[-1]

        client._requests._presence = recorded
        await server.serve(held, service="svc")
        call = asyncio.create_task(client.request("svc", "go", timeout=5))
        await taken.wait()
        draining = asyncio.create_task(server.drain(grace=5))
        async with asyncio.timeout(5):
            while not looked:  # noqa: ASYNC110 - the check is a timer, not an event
                await asyncio.sleep(0.01)
        assert broker.consumer_count(server.topology.service_queue("svc")) == 0
        finish.set()
        reply = await call
        await draining
    assert reply.result == "finished while draining"
    assert looked == [False]
    assert client.stats.no_instance == 0


async def test_the_check_can_be_turned_off() -> None:
    """presence_check=0: the request waits for its whole timeout, as a durable queue allows."""
    broker = MemoryBroker()
    await _served_then_gone(broker)
    async with MemoryBus(broker, Settings(presence_check=0)) as client:
        with pytest.raises(RequestTimeout):
            await client.request("svc", "go", timeout=0.3)


async def test_a_backlog_of_slow_requests_to_one_service_looks_at_its_queue_once() -> None:
    """Many requests past the check at once share one look at the receiver's queue."""
    broker = MemoryBroker()
    gate = asyncio.Event()

    async def held(request: RequestEnvelope) -> str:
        await gate.wait()
        return "done"

    async with MemoryBus(broker, QUICK) as server, MemoryBus(broker, QUICK) as client:
        await server.serve(held, service="svc", prefetch=100)
        looks = 0
        look = client._unserved

        async def counted(receiver: str) -> bool:
            nonlocal looks
            looks += 1
            return await look(receiver)

        client._requests._presence = counted
        calls = [asyncio.create_task(client.request("svc", "go", timeout=5)) for _ in range(50)]
        async with asyncio.timeout(5):
            while looks == 0:  # noqa: ASYNC110 - the checks are timers, not events
                await asyncio.sleep(0.01)
        # The 50 checks were timers due together: all have fired and joined that look.
        gate.set()
        replies = await asyncio.gather(*calls)
    assert [reply.result for reply in replies] == ["done"] * 50
    assert looks == 1


async def test_looks_at_many_receivers_go_a_few_at_a_time_and_skip_answered_requests() -> None:
    """Each look opens a channel: at most 8 at once, and none for a request answered meanwhile."""
    broker = MemoryBroker()
    gate = asyncio.Event()
    release_looks = asyncio.Event()

    async def held(request: RequestEnvelope) -> str:
        await gate.wait()
        return "done"

    services = [f"svc{i}" for i in range(40)]
    async with contextlib.AsyncExitStack() as stack:
        for service in services:  # one bus serves one service
            server = await stack.enter_async_context(MemoryBus(broker, QUICK))
            await server.serve(held, service=service)
        client = await stack.enter_async_context(MemoryBus(broker, QUICK))
        active = peak = looks = 0

        async def slow_look(receiver: str) -> bool:
            nonlocal active, peak, looks
            looks += 1
            active += 1
            peak = max(peak, active)
            await release_looks.wait()
            active -= 1
            return False

        client._requests._presence = slow_look
        calls = [asyncio.create_task(client.request(s, "go", timeout=5)) for s in services]
        async with asyncio.timeout(5):
            while active < 8:  # noqa: ASYNC110 - the checks are timers, not events
                await asyncio.sleep(0.01)
        gate.set()  # every request is answered while 32 checks wait their turn
        replies = await asyncio.gather(*calls)
        release_looks.set()
        await asyncio.gather(*client._requests._checks)
    assert [reply.result for reply in replies] == ["done"] * 40
    assert (peak, looks) == (8, 8)


async def test_requests_answered_in_time_share_one_sweep_not_a_timer_each() -> None:
    """500 requests answered at once arm no presence timer each: one sweep looks at them all.

    The loop's timers are counted while they run: each request's own deadline is one; the
    presence check adds a handful for the whole batch, however many requests there are.
    """
    broker = MemoryBroker()

    async def echo(request: RequestEnvelope) -> str:
        return "ok"

    async with MemoryBus(broker, QUICK) as server, MemoryBus(broker, QUICK) as client:
        await server.serve(echo, service="svc", prefetch=500)
        loop = asyncio.get_running_loop()
        timers = 0
        call_at = loop.call_at

        def counted(when: float, callback, *args, **kwargs):  # type: ignore[no-untyped-def]
            nonlocal timers
            timers += 1
            return call_at(when, callback, *args, **kwargs)

        loop.call_at = counted  # type: ignore[method-assign]
        try:
            replies = await asyncio.gather(
                *(client.request("svc", "go", timeout=5) for _ in range(500))
            )
        finally:
            del loop.call_at  # the instance attribute: the class's method again
        sweeper = client._requests._sweeper
    assert [reply.result for reply in replies] == ["ok"] * 500
    assert timers <= 500 + 10  # the deadlines; was 1,000 with a presence timer per request
    assert sweeper is None or sweeper.done()  # closed with the bus


class _Unconfirmed:
    """A publisher that writes without a confirm: nothing comes back to say it was routed."""

    async def publish(self, envelope: RequestEnvelope, **options: object) -> None:
        assert options["confirm"] is False


async def _nobody_has_a_queue(receiver: str) -> bool | None:
    return None


@pytest.mark.parametrize(
    ("receiver", "ends_with"), [("nobody", Unroutable), ("broadcast", RequestTimeout)]
)
async def test_an_unconfirmed_request_to_a_receiver_without_a_queue_is_unroutable(
    receiver: str, ends_with: type[Exception]
) -> None:
    """No confirm, so no return: the presence check finds no queue and says unroutable,
    except for a broadcast, which has no queue of its own to look at."""
    requester = Requester(
        PendingRequests(), BusStats(), 8, presence=_nobody_has_a_queue, presence_after=0.05
    )
    envelope = RequestEnvelope(
        sender_id="client-1", receiver_id=receiver, payload={"action": "go", "parameters": {}}
    )
    with pytest.raises(ends_with):
        await requester.send(
            _Unconfirmed(),
            envelope,
            reply_to="amq.rabbitmq.reply-to",
            timeout=0.5,
            on_progress=None,
            confirm=False,
        )
    requester.close()
