"""Push notifications: a client registers a webhook and learns of the question and of the
task's end without a stream open; deliveries that fail are tried again.

The webhook is a small Starlette app served by uvicorn that refuses its first deliveries
(503), then takes them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryPushNotificationConfigStore
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import InvalidParamsError
from a2a_client import sdk_client, user_message
from gateway_agents import Clerk
from gateway_team import HEARTBEAT, KEY, Team
from webhook_server import TOKEN, Webhook, sent, serving_webhook

from agentbus.gateway._push import PushSender
from support.waiting import wait_until

DEADLINE = 15.0


@pytest.fixture
async def webhook() -> AsyncIterator[Webhook]:
    """A webhook that refuses its first three deliveries."""
    async with serving_webhook(refuse=3) as hook:
        yield hook


async def test_a_webhook_learns_of_the_question_and_of_the_end_despite_failures(
    team: Team, webhook: Webhook
) -> None:
    """The question and the end reach the webhook, each event once, in order, after
    refused tries; the answer's follow-up goes without a stream either."""
    await team.add(Clerk(agent_id="clerk-1", settings=team.settings, heartbeat_interval=HEARTBEAT))
    gateway = await team.serve(push_private_hosts=True, push_backoff=0.05)
    await wait_until(lambda: "clerk" in gateway.directory.cards, DEADLINE)
    card = gateway.a2a_card("clerk")
    assert card is not None
    assert card.capabilities.push_notifications
    async with sdk_client(f"{team.url}/agents/clerk", KEY) as client:
        message = user_message({"who": "ann"}, skill="book")
        [response] = [r async for r in client.send_message(sent(message, webhook.url))]
        task = response.task
        await wait_until(lambda: "TASK_STATE_INPUT_REQUIRED" in webhook.states(), DEADLINE)
        for text, seen in (("Oslo", "TASK_STATE_INPUT_REQUIRED"), ("2", "TASK_STATE_COMPLETED")):
            follow_up = user_message(text=text)
            follow_up.task_id = task.id
            [_ async for _ in client.send_message(sent(follow_up))]
            await wait_until(lambda seen=seen: webhook.states()[-1] == seen, DEADLINE)
    states = webhook.states()
    assert states[:2] == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"]
    assert states.count("TASK_STATE_INPUT_REQUIRED") == 2
    assert states[-1] == "TASK_STATE_COMPLETED"
    assert len(webhook.tries) == len(webhook.taken) + 3  # three refused, then each once
    assert set(webhook.tries) == {TOKEN}
    (question,) = [
        part["data"]["question"]
        for body in webhook.taken
        for part in body.get("statusUpdate", {})
        .get("status", {})
        .get("message", {})
        .get("parts", [])
        if "data" in part and part["data"]["question"]["text"] == "Where to, ann?"
    ]
    assert question["context_id"] == task.context_id


async def test_a_webhook_on_a_private_address_is_refused_by_default(team: Team) -> None:
    """Without push_private_hosts, a webhook on 127.0.0.1 is an invalid-params error."""
    await team.add(Clerk(agent_id="clerk-1", settings=team.settings, heartbeat_interval=HEARTBEAT))
    gateway = await team.serve()
    await wait_until(lambda: "clerk" in gateway.directory.cards, DEADLINE)
    async with sdk_client(f"{team.url}/agents/clerk", KEY) as client:
        message = user_message({"who": "bo"}, skill="book")
        with pytest.raises(InvalidParamsError, match="push notification URL"):
            [_ async for _ in client.send_message(sent(message, "http://127.0.0.1:9/hook"))]


@pytest.mark.parametrize(
    ("refusal", "headers", "tries", "taken"),
    [
        (400, {}, 1, 0),  # refused for good: not tried again
        (503, {}, 4, 0),  # failing on: tried ``attempts`` times, then dropped
        (429, {"Retry-After": "0.3"}, 2, 1),  # tried again, no sooner than it asked
    ],
)
async def test_the_sender_retries_what_may_pass_and_no_more(
    refusal: int, headers: dict[str, str], tries: int, taken: int
) -> None:
    """A 4xx is final; 408, 429 and 5xx are tried again, ``attempts`` times in all, after
    the Retry-After they ask; the next event waits for the one before."""
    configs = InMemoryPushNotificationConfigStore()
    sender = PushSender(configs, attempts=4, backoff=0.01)
    async with serving_webhook(
        refuse=max(tries - taken, 1), refusal=refusal, headers=headers
    ) as hook:
        config = a2a.TaskPushNotificationConfig(url=hook.url, token=TOKEN)
        await configs.set_info("t1", config, ServerCallContext())
        started = time.monotonic()
        await sender.send_notification("t1", a2a.Task(id="t1", status=a2a.TaskStatus(state=3)))
        await sender.send_notification("t1", a2a.Task(id="t1", status=a2a.TaskStatus(state=4)))
        await wait_until(lambda: len(hook.tries) == tries + 1, DEADLINE)  # and the second event
        took = time.monotonic() - started
        await sender.aclose()
    assert len(hook.taken) == taken + 1
    assert hook.states()[-1] == "TASK_STATE_FAILED"
    if headers:
        assert took >= 0.3
