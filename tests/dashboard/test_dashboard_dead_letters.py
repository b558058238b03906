"""Dead letters in a real browser: listed without loss, replayed once, discarded; token-gated."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aio_pika
import orjson
import pytest
from dashboard_support import DESKTOP, Browser, DashboardProcess, shot
from processes import Processes, within

from agentbus.bus import Topology


def letter(message_id: str) -> str:
    return f'tr[data-letter-id="{message_id}"]'


def correlation(reply: dict[str, Any]) -> str:
    return str(reply["metadata"]["correlation_id"])


def request(message_id: str, n: int) -> bytes:
    return orjson.dumps(
        {
            "protocol_version": "1.0",
            "message_id": message_id,
            "timestamp": "2026-01-01T00:00:00Z",
            "sender_id": "test-client",
            "receiver_id": "alpha",
            "message_type": "request",
            "payload": {"action": "double", "parameters": {"n": n}},
        }
    )


@pytest.fixture
async def channel(broker_url: str) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
    """A plain AMQP client's channel: the foreign sender of the poison messages."""
    connection = await aio_pika.connect(broker_url)
    async with connection:
        yield await connection.channel()


async def queue_length(channel: aio_pika.abc.AbstractChannel, name: str) -> int:
    queue = await channel.declare_queue(name, passive=True)
    return queue.declaration_result.message_count or 0


async def test_dead_letters_show_replay_once_discard_and_need_the_token(
    procs: Processes,
    dashboard: DashboardProcess,
    browser: Browser,
    screens: Path,
    channel: aio_pika.abc.AbstractChannel,
    exchange_name: str,
) -> None:
    """A poison shows (reason, key); replay answers it exactly once; discard removes one."""
    dead_letter_queue = Topology(exchange_name).dead_letter_queue
    exchange = await channel.get_exchange(exchange_name)
    replies: list[dict[str, Any]] = []
    reply_queue = await channel.declare_queue("", exclusive=True)

    async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        replies.append(orjson.loads(message.body))

    await reply_queue.consume(on_reply, no_ack=True)

    # An alpha came and went: its service queue stays, with nobody consuming it.
    first = procs.agent("Alpha", "alpha-1")
    await first.started()
    first.popen.terminate()
    await first.exited(30)
    # A request that expires in the queue: dead-lettered by the broker (reason expired).
    await exchange.publish(
        aio_pika.Message(
            request("poison-expired", 21),
            message_id="poison-expired",
            content_type="application/json",
            reply_to=reply_queue.name,
            expiration=0.2,
        ),
        routing_key="agent.alpha.request",
    )
    page = await browser.new_page(viewport=DESKTOP)
    await page.goto(dashboard.url)
    await page.wait_for_selector(letter("poison-expired"), timeout=10_000)
    row = page.locator(letter("poison-expired"))
    assert "expired" in await row.inner_text()
    assert "agent.alpha.request" in await row.inner_text()
    assert "test-client" in await row.inner_text()

    # An undecodable one: the agent dead-letters it (reason rejected).
    second = procs.agent("Alpha", "alpha-2")
    await second.started()
    for _ in range(2):  # the same id twice: two dead letters, each picked on its own
        await exchange.publish(
            aio_pika.Message(b"not json {", message_id="poison-garbage"),
            routing_key="agent.alpha.request",
        )
    await page.wait_for_selector(letter("poison-garbage#2"), timeout=10_000)
    assert "rejected" in await page.locator(letter("poison-garbage")).inner_text()
    await page.click(f"{letter('poison-expired')} summary")  # the envelope, pretty-printed
    envelope = await page.locator(f"{letter('poison-expired')} pre").inner_text()
    assert '"action": "double"' in envelope
    await shot(page, screens, "1-dead-letters-listed")
    # Looking lost nothing: all three are still in the queue after the page read them.
    assert await queue_length(channel, dead_letter_queue) == 3

    # Without the token: replay and discard refused, nothing moved.
    replay_button = page.locator(f'{letter("poison-expired")} button[data-action="replay"]')
    assert await replay_button.is_disabled()
    for action in ("replay", "discard"):
        status = await page.evaluate(
            """async (action) => (await fetch(`/api/dead-letters/${action}`, {method: "POST",
                 headers: {Authorization: "Bearer nope"},
                 body: JSON.stringify({ids: ["poison-expired"]})})).status""",
            action,
        )
        assert status == 401
    assert await queue_length(channel, dead_letter_queue) == 3
    assert replies == []

    bad = await page.evaluate(
        """async (token) => (await fetch("/api/dead-letters/replay", {method: "POST",
             headers: {Authorization: `Bearer ${token}`}, body: "{not json"})).status""",
        dashboard.token,
    )
    assert bad == 400  # bad input: a clear refusal, nothing touched
    assert await queue_length(channel, dead_letter_queue) == 3

    await page.fill("#token", dashboard.token)
    await page.click("#auth button")
    await page.wait_for_selector('#auth-state[data-ok="true"]')

    # Replay: sent once to agent.alpha.request, answered once, gone from the queue.
    await page.click(f'{letter("poison-expired")} button[data-action="replay"]')
    await page.wait_for_selector(letter("poison-expired"), state="detached", timeout=10_000)
    await within(10, lambda: len(replies) >= 1, "the replayed request's reply")
    again = await page.evaluate(
        """async (token) => (await fetch("/api/dead-letters/replay", {method: "POST",
             headers: {Authorization: `Bearer ${token}`},
             body: JSON.stringify({ids: ["poison-expired"]})})).json()""",
        dashboard.token,
    )
    assert again == {"replayed": [], "failed": {"poison-expired": "not in the dead-letter queue"}}
    await page.wait_for_selector("#dlq-summary >> text=1 replayed")
    # A request sent after the replay, answered: a second copy sent before it would have
    # been answered by now too. Exactly one answer to the replayed request.
    await exchange.publish(
        aio_pika.Message(
            request("after-replay", 5),
            message_id="after-replay",
            content_type="application/json",
            reply_to=reply_queue.name,
        ),
        routing_key="agent.alpha.request",
    )
    await within(10, lambda: len(replies) >= 2, "the reply to the request sent after")
    answered = [(correlation(reply), reply["payload"]["result"]) for reply in replies]
    assert sorted(answered) == [("after-replay", 10), ("poison-expired", 42)]
    audit = [r for r in dashboard.process.log() if r.get("event") == "dead letter replayed"]
    assert [r["message_id"] for r in audit] == ["poison-expired"]
    await shot(page, screens, "2-replayed")

    # Discard a selection: the garbage goes for good.
    await page.check(f'{letter("poison-garbage")} input[type="checkbox"]')
    await page.check(f'{letter("poison-garbage#2")} input[type="checkbox"]')
    await page.click('button[data-action="discard-selected"]')
    await page.wait_for_selector(letter("poison-garbage"), state="detached", timeout=10_000)
    await page.wait_for_selector(letter("poison-garbage#2"), state="detached")
    assert await queue_length(channel, dead_letter_queue) == 0
    await page.wait_for_selector("#dlq-body >> text=the dead-letter queue is empty")
    await shot(page, screens, "3-discarded")
