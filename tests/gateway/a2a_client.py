"""The foreign client of the gateway tests: the official a2a-sdk client, with a bearer key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from a2a.client import Client, ClientConfig, create_client
from a2a.helpers import new_data_part, new_message, new_text_part
from a2a.types import a2a_pb2 as a2a
from google.protobuf.json_format import MessageToDict


@asynccontextmanager
async def sdk_client(
    url: str, key: str | None, *, streaming: bool = False, binding: str = "JSONRPC"
) -> AsyncIterator[Client]:
    """Open an SDK client for the agent at ``url`` (its card is fetched first)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        config = ClientConfig(
            streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding]
        )
        client = await create_client(url, config)
        async with client:
            yield client


def user_message(
    data: dict[str, Any] | None = None, *, text: str | None = None, skill: str | None = None
) -> a2a.Message:
    """Return a user message with a data part and/or a text part, naming ``skill``."""
    parts = []
    if data is not None:
        parts.append(new_data_part(data))
    if text is not None:
        parts.append(new_text_part(text))
    message = new_message(parts, role=a2a.Role.ROLE_USER)
    if skill is not None:
        message.metadata.update({"skill": skill})
    return message


async def send(
    client: Client, message: a2a.Message, *, return_immediately: bool = False
) -> list[a2a.StreamResponse]:
    """Send ``message``; return every response the client yields."""
    request = a2a.SendMessageRequest(
        message=message,
        configuration=a2a.SendMessageConfiguration(return_immediately=return_immediately),
    )
    return [item async for item in client.send_message(request)]


def data_of(part: a2a.Part) -> Any:
    """Return a data part's value as plain JSON."""
    return MessageToDict(part.data)


def state_name(state: int) -> str:
    """Return ``TASK_STATE_COMPLETED`` for the enum value."""
    return a2a.TaskState.Name(state)  # type: ignore[arg-type]
