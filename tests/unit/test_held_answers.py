"""Answers held on a reply queue (``reply_queue(hold=True)``) leave it only when released.

A requester that dies between getting an answer and making it durable leaves the answer
on the queue: whoever opens the queue next gets it, and nothing is asked twice.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from agentbus import Agent, Settings, skill
from agentbus.envelopes import RequestEnvelope, RequestPayload
from agentbus.testing import MemoryBroker, MemoryBus

SETTINGS = Settings(shutdown_grace=0.2)
QUEUE = "plan-q"


class Echo(Agent):
    name = "echo"
    runs: Counter[str] = Counter()

    @skill
    async def say(self, text: str) -> str:
        Echo.runs[text] += 1
        return text


def _request(sender: str, text: str) -> RequestEnvelope:
    return RequestEnvelope(
        sender_id=sender,
        receiver_id="echo",
        payload=RequestPayload(action="say", parameters={"text": text}),
    )


async def test_an_answer_not_released_goes_back_for_the_next_requester() -> None:
    """Requester 1 closes holding the answer; requester 2 opens the queue and gets that
    answer without asking again; released, it leaves the queue."""
    broker = MemoryBroker()
    Echo.runs = Counter()
    async with Echo(bus=MemoryBus(broker, SETTINGS, agent_id="echo-1")):
        first = await MemoryBus(broker, SETTINGS, agent_id="leader-1").open()
        await first.reply_queue(QUEUE, hold=True)
        reply_to = first.topology.reply_queue(QUEUE)
        request = _request("leader-1", "once")
        answer = await first.send_request(request, reply_to=reply_to, timeout=5)
        queued_while_held = broker.message_count(reply_to)
        await first.aclose()  # dies, in effect, before it made the answer durable
        back_on_the_queue = broker.message_count(reply_to)

        second = await MemoryBus(broker, SETTINGS, agent_id="leader-2").open()
        stop = await second.reply_queue(QUEUE, expect=[request.message_id], hold=True)
        again = await second.send_request(request, reply_to=reply_to, timeout=5, sent=True)
        released = second.release(request.message_id)
        await stop(False)
        await second.aclose()

    assert (answer.result, again.result) == ("once", "once")
    assert Echo.runs == Counter({"once": 1})  # asked once, answered twice from the queue
    assert (queued_while_held, back_on_the_queue) == (0, 1)  # unacked, then requeued
    assert released
    assert broker.message_count(reply_to) == 0


async def test_a_released_answer_leaves_the_queue_and_an_unheld_queue_acks_at_once() -> None:
    """``release`` acknowledges a held answer; without ``hold`` nothing waits for it."""
    broker = MemoryBroker()
    async with (
        Echo(bus=MemoryBus(broker, SETTINGS, agent_id="echo-1")),
        MemoryBus(broker, SETTINGS, agent_id="leader-1") as held,
        MemoryBus(broker, SETTINGS, agent_id="client-1") as plain,
    ):
        await held.reply_queue(QUEUE, hold=True)
        await plain.reply_queue("plain-q")
        held_to, plain_to = held.topology.reply_queue(QUEUE), plain.topology.reply_queue("plain-q")
        request = _request("leader-1", "a")
        await held.send_request(request, reply_to=held_to, timeout=5)
        released = held.release(request.message_id)
        again = held.release(request.message_id)
        unheld = _request("client-1", "b")
        await plain.send_request(unheld, reply_to=plain_to, timeout=5)
        not_held = plain.release(unheld.message_id)
    assert (released, again, not_held) == (True, False, False)
    assert broker.message_count(held_to) == 0


async def test_a_copy_of_a_held_answer_waits_for_the_same_release() -> None:
    """The broker redelivers a held answer after a reconnect: the copy is not acked as an
    answer nobody waits for, it waits for the release the first one waited for."""
    broker = MemoryBroker()
    async with (
        Echo(bus=MemoryBus(broker, SETTINGS, agent_id="echo-1")),
        MemoryBus(broker, SETTINGS, agent_id="leader-1") as held,
    ):
        await held.reply_queue(QUEUE, hold=True)
        reply_to = held.topology.reply_queue(QUEUE)
        request = _request("leader-1", "twice")
        answer = await held.send_request(request, reply_to=reply_to, timeout=5)
        # The same answer once more on the queue, as a redelivery after a reconnect.
        await held._require_publisher().publish_reply(answer, reply_to)
        for _ in range(10):  # let the copy reach the dispatcher
            await asyncio.sleep(0)
        dropped_as_unknown = held.stats.unknown_replies
        released = held.release(request.message_id)
    assert dropped_as_unknown == 0
    assert released
    assert broker.message_count(reply_to) == 0  # both acked with the release


async def test_release_all_lets_go_every_answer_held_on_one_queue_and_no_other() -> None:
    """A queue used again (a leader's next plan) first lets go what its last use held:
    those answers leave it; another queue's stay held, and go back when it closes."""
    broker = MemoryBroker()
    async with (
        Echo(bus=MemoryBus(broker, SETTINGS, agent_id="echo-1")),
        MemoryBus(broker, SETTINGS, agent_id="leader-1") as held,
    ):
        await held.reply_queue(QUEUE, hold=True)
        await held.reply_queue("other-q", hold=True)
        reply_to, other_to = held.topology.reply_queue(QUEUE), held.topology.reply_queue("other-q")
        for text in ("a", "b"):
            await held.send_request(_request("leader-1", text), reply_to=reply_to, timeout=5)
        await held.send_request(_request("leader-1", "c"), reply_to=other_to, timeout=5)
        released = held.release_all(QUEUE)
        again = held.release_all(QUEUE)
    assert (released, again) == (2, 0)
    assert broker.message_count(reply_to) == 0  # acked
    assert broker.message_count(other_to) == 1  # still held when the bus closed: back
