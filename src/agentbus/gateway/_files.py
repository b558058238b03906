"""Files between A2A and the bus: a message's file parts in as artifacts, artifacts out as files.

A file part (its bytes, ``raw``, or a ``url`` the gateway fetches) fills a parameter of the
skill typed ``Artifact``: the one the part's metadata ``parameter`` names, else the skill's
artifact parameters in their order. The gateway stores it, a chunk at a time, for the
service it calls (the broker user of that name reads it) and sends the reference. A result
that is an artifact, or a list of them, comes back as file parts: the bytes, read by the
caller's bus and checked against the artifact's size and SHA-256.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any, Final

import httpx
from a2a.types import a2a_pb2 as a2a
from pydantic import ValidationError

from agentbus._exceptions import UsageError
from agentbus.bus import Artifact, Transport
from agentbus.gateway._parts import BusCall, from_json

__all__ = ["Files", "result_files"]

_FETCH_TIMEOUT: Final = 60.0

Screen = Callable[[str], Awaitable[bool]]


class Files:
    """Stores a call's files before it goes on the bus, reads a result's artifacts back.

    Args:
        screen: Refuses file URLs (private addresses), checked before each fetch; None
            takes every URL.
    """

    def __init__(self, screen: Screen | None) -> None:
        self._screen = screen

    async def store(self, bus: Transport, call: BusCall) -> BusCall:
        """Return ``call`` with each of its files stored and its reference as the parameter.

        Raises:
            UsageError: a URL is refused or cannot be fetched.
            QuotaExceeded: a file is over the caller's quota or the largest size allowed.
        """
        if not call.files:
            return call
        parameters = dict(call.parameters)
        for name, part in call.files.items():
            source = part.raw if part.WhichOneof("content") == "raw" else self._fetch(part.url)
            try:
                stored = await bus.artifacts.put(
                    source,
                    name=part.filename or name,
                    media_type=part.media_type or "application/octet-stream",
                    reader=call.service,
                )
            except httpx.HTTPError as exc:
                raise UsageError(f"file {name!r} not fetched from {part.url!r}: {exc}") from exc
            parameters[name] = stored.wire()
        return replace(call, parameters=parameters, files={})

    async def _fetch(self, url: str) -> AsyncIterator[bytes]:
        if self._screen is not None and not await self._screen(url):
            raise UsageError(f"the URL {url!r} is refused: a private or local address")
        async with (
            httpx.AsyncClient(timeout=_FETCH_TIMEOUT) as client,
            client.stream("GET", url) as response,
        ):
            response.raise_for_status()
            async for chunk in response.aiter_bytes():
                yield chunk


async def result_files(bus: Transport, result: Any) -> list[a2a.Part] | None:
    """``result`` as file parts when it is an artifact or a list of them, else None.

    Raises:
        AgentBusError: an artifact cannot be read (missing, expired, corrupt, refused).
    """
    items = result if isinstance(result, list) and result else [result]
    if not all(isinstance(item, dict) and item.get("kind") == "artifact" for item in items):
        return None
    try:
        artifacts = [Artifact.model_validate(from_json(item)) for item in items]
    except ValidationError:
        return None
    return [
        a2a.Part(
            raw=await artifact.read(via=bus.artifacts),
            filename=artifact.name,
            media_type=artifact.media_type,
        )
        for artifact in artifacts
    ]
