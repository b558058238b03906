"""Schedules on a real RabbitMQ across two leader processes, one killed with SIGKILL.

A schedule ticking every second sends a request to ``tickrec``; a raw AMQP queue bound
to that service's routing key takes every copy sent (de-duplication would hide a second
copy from a served handler: this sees it). Midway the leader holding the lease is killed
with SIGKILL; the other takes the ticking over. Every tick from the first to the last
arrives, none lost, and once, but for the one the killed leader sent as it died, which the
survivor may send again under the same message id (the journal has it fired, not yet
noted as sent): the receivers' de-duplication takes that copy for what it is.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
from collections import Counter
from datetime import UTC, datetime

import aio_pika
import pytest
from processes import STARTUP, AgentProcess, Processes, within

from agentbus.leader import PlanClient

pytestmark = pytest.mark.timeout(180)

SECONDS = 20  # of ticking, about half of it after the kill
TAKEN = "schedules taken"  # what a leader logs when it holds the lease and ticks


def _tick(message_id: str) -> datetime:
    label = message_id.rsplit("-", 1)[1]  # schedule/ticks-20261128T180124Z
    return datetime.strptime(label, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


async def test_a_schedule_every_second_runs_each_tick_once_through_a_kill_9(
    procs: Processes, raw_channel: aio_pika.abc.AbstractChannel
) -> None:
    """Two leaders, a schedule every 1 s; the ticking leader SIGKILLed after ~10 s; every
    tick from the first to the last reaches the service exactly once."""
    leaders = [procs.leader("leader-1"), procs.leader("leader-2")]
    for leader in leaders:
        await leader.started()
    exchange = await raw_channel.declare_exchange(
        procs.exchange, aio_pika.ExchangeType.TOPIC, durable=True
    )
    queue = await raw_channel.declare_queue(exclusive=True)
    await queue.bind(exchange, routing_key="agent.tickrec.request")
    got: list[str] = []
    senders: dict[str, list[str]] = {}

    async def take(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        got.append(str(message.message_id))
        senders.setdefault(str(message.message_id), []).append(
            json.loads(message.body)["sender_id"]
        )
        await message.ack()

    await queue.consume(take)
    client = await procs.client()
    plans = PlanClient(client)
    request = {"service": "tickrec", "action": "record"}
    schedule = {"name": "ticks", "every": 1, "missed": "all", "request": request}
    await plans.add_schedule(schedule, timeout=STARTUP)
    await within(SECONDS / 2 + 5, lambda: len(got) >= SECONDS // 2, "half of the ticks")
    ticking = _ticking(leaders)
    ticking.popen.send_signal(signal.SIGKILL)
    killed_at = len(got)
    await within(SECONDS / 2 + 15, lambda: len(got) >= killed_at + SECONDS // 2, "the rest")
    assert await plans.remove_schedule("ticks", timeout=STARTUP)
    counts = Counter(got)
    survivor = next(leader for leader in leaders if leader is not ticking)
    again = {message_id: senders[message_id] for message_id, n in counts.items() if n > 1}
    # At most the tick in flight at the kill, sent by the dead leader, then by the survivor.
    assert len(again) <= 1, f"sent twice: {again}"
    for sent_by in again.values():
        assert sent_by == [ticking.agent_id, survivor.agent_id], f"sent twice: {again}"
    ticks = sorted(_tick(message_id) for message_id in counts)
    steps = {(b - a).total_seconds() for a, b in itertools.pairwise(ticks)}
    assert steps == {1.0}, f"ticks missed: steps {sorted(steps)}"
    assert survivor.logged(TAKEN) is not None


def _ticking(leaders: list[AgentProcess]) -> AgentProcess:
    holders = [leader for leader in leaders if leader.logged(TAKEN) is not None]
    assert len(holders) == 1, "exactly one leader holds the lease"
    return holders[0]


async def test_a_raw_amqp_client_adds_lists_and_removes_a_schedule(
    procs: Processes, raw_channel: aio_pika.abc.AbstractChannel
) -> None:
    """Plain JSON envelopes over plain AMQP (no agentbus): ``schedule_add`` with a cron
    expression in a time zone, ``schedule_list``, ``schedule_remove``: each answered."""
    await procs.leader("leader-1").started()
    exchange = await raw_channel.declare_exchange(
        procs.exchange, aio_pika.ExchangeType.TOPIC, durable=True
    )
    replies = await raw_channel.declare_queue(exclusive=True)
    schedule = {
        "name": "nightly",
        "cron": "30 2 * * *",
        "tz": "Europe/Paris",
        "request": {"service": "reports", "action": "build", "task": True},
    }
    calls = [
        ("schedule_add", {"schedule": schedule}),
        ("schedule_list", {}),
        ("schedule_remove", {"name": "nightly"}),
    ]
    results = []
    async with replies.iterator() as incoming:
        for n, (action, parameters) in enumerate(calls):
            envelope = {
                "protocol_version": "1.2",
                "message_id": f"raw-{n}",
                "sender_id": "raw-client",
                "receiver_id": "leader",
                "message_type": "request",
                "payload": {"action": action, "parameters": parameters},
            }
            body = json.dumps(envelope).encode()
            message = aio_pika.Message(body, message_id=f"raw-{n}", reply_to=replies.name)
            await exchange.publish(message, routing_key="agent.leader.request")
            async with asyncio.timeout(STARTUP):
                reply = await anext(incoming)
                await reply.ack()
            payload = json.loads(reply.body)["payload"]
            assert payload["status"] == "success", payload
            results.append(payload["result"])
    added, listing, removed = results
    next_tick = datetime.fromisoformat(added["next_tick"])
    assert (next_tick.minute, next_tick.second) == (30, 0)  # 02:30 in Paris, in UTC
    assert [state["name"] for state in listing["schedules"]] == ["nightly"]
    assert removed == {"name": "nightly", "removed": True}
