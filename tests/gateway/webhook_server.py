"""A webhook for the push notification tests: a Starlette app on uvicorn, recording what it
is sent, that refuses its first deliveries."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from a2a.types import a2a_pb2 as a2a
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from support.ports import free_port
from support.servers import start_uvicorn, stop_uvicorn

TOKEN = "webhook-token-0123"


@dataclass
class Webhook:
    """What the webhook was sent: each try (its token), and the bodies it took."""

    url: str
    refuse: int
    refusal: int = 503
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with each refusal (a ``Retry-After``)."""
    tries: list[str | None] = field(default_factory=list)
    taken: list[dict[str, Any]] = field(default_factory=list)

    async def endpoint(self, request: Request) -> Response:
        self.tries.append(request.headers.get("x-a2a-notification-token"))
        if len(self.tries) <= self.refuse:
            return Response(status_code=self.refusal, headers=self.headers)
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


@contextlib.asynccontextmanager
async def serving_webhook(
    *, refuse: int, refusal: int = 503, headers: dict[str, str] | None = None
) -> AsyncIterator[Webhook]:
    """A webhook on a free port that refuses its first ``refuse`` deliveries (``refusal``,
    with ``headers``)."""
    port = free_port()
    hook = Webhook(
        f"http://127.0.0.1:{port}/hook", refuse=refuse, refusal=refusal, headers=headers or {}
    )
    app = Starlette(routes=[Route("/hook", hook.endpoint, methods=["POST"])])
    server, serving = await start_uvicorn(app, port)
    try:
        yield hook
    finally:
        await stop_uvicorn(server, serving, force=True)


def sent(message: a2a.Message, url: str | None = None) -> a2a.SendMessageRequest:
    """``message``, returned at once, with the webhook ``url`` registered for its task."""
    configuration = a2a.SendMessageConfiguration(return_immediately=True)
    if url is not None:
        config = a2a.TaskPushNotificationConfig(url=url, token=TOKEN)
        configuration.task_push_notification_config.CopyFrom(config)
    return a2a.SendMessageRequest(message=message, configuration=configuration)
