"""Push notifications: a client registers a webhook and learns of the question and of the
task's end without a stream open; deliveries that fail are tried again.

The webhook is a small Starlette app served by uvicorn that refuses its first deliveries
(503), then takes them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import InvalidParamsError
from a2a_client import sdk_client, user_message
from gateway_agents import Clerk
from gateway_team import HEARTBEAT, KEY, Team, free_port, start_uvicorn, stop_uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from waiting import wait_until

DEADLINE = 15.0
TOKEN = "webhook-token-0123"


@dataclass
class Webhook:
    """What the webhook was sent: each try (its token), and the bodies it took."""

    url: str
    refuse: int
    tries: list[str | None] = field(default_factory=list)
    taken: list[dict[str, Any]] = field(default_factory=list)

    async def endpoint(self, request: Request) -> Response:
        self.tries.append(request.headers.get("x-a2a-notification-token"))
        if len(self.tries) <= self.refuse:
            return Response(status_code=503)
        self.taken.append(await request.json())
        return Response(status_code=204)

    def states(self) -> list[str]:
        """The task states the webhook took, in order (a whole task's, or a status update's)."""
        found = []
        for body in self.taken:
            status = (body.get("task") or body.get("statusUpdate") or {}).get("status")
            if status is not None:
                found.append(status["state"])
        return found


@pytest.fixture
async def webhook() -> AsyncIterator[Webhook]:
    """A webhook that refuses its first three deliveries."""
    port = free_port()
    hook = Webhook(f"http://127.0.0.1:{port}/hook", refuse=3)
    app = Starlette(routes=[Route("/hook", hook.endpoint, methods=["POST"])])
    server, serving = await start_uvicorn(app, port)
    yield hook
    await stop_uvicorn(server, serving, force=True)


def sent(message: a2a.Message, url: str | None = None) -> a2a.SendMessageRequest:
    """``message``, returned at once, with the webhook ``url`` registered for its task."""
    configuration = a2a.SendMessageConfiguration(return_immediately=True)
    if url is not None:
        config = a2a.TaskPushNotificationConfig(url=url, token=TOKEN)
        configuration.task_push_notification_config.CopyFrom(config)
    return a2a.SendMessageRequest(message=message, configuration=configuration)


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
