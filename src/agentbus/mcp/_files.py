"""Artifacts a tool returns, as MCP embedded resources the client reads from the result.

A result that is an artifact, or a list of them, gets one embedded resource each beside
its text and structured content (the reference): the bytes, read by the caller's bus and
checked against size and SHA-256, at ``agentbus://artifacts/<id>`` with the artifact's media
type. An artifact over ``max_embedded_size`` is left out, and the text says so: its
reference is still in the structured content, for a bus client to read.
"""

from __future__ import annotations

import base64
from typing import Any

import mcp_types as types
from pydantic import ValidationError

from agentbus.bus import Artifact, Transport

__all__ = ["embed_files"]


async def embed_files(
    bus: Transport, result: Any, outcome: types.CallToolResult, max_size: int
) -> types.CallToolResult:
    """``outcome`` with ``result``'s artifacts embedded (unchanged when it has none).

    Raises:
        AgentBusError: an artifact cannot be read (missing, expired, corrupt, refused).
    """
    artifacts = _artifacts(result)
    if not artifacts:
        return outcome
    content: list[Any] = list(outcome.content)
    for artifact in artifacts:
        uri = f"agentbus://artifacts/{artifact.id}"
        if artifact.size > max_size:
            text = f"{artifact.name} ({artifact.size} bytes) is over {max_size} bytes: not embedded"
            content.append(types.TextContent(type="text", text=text))
            continue
        blob = base64.b64encode(await artifact.read(via=bus.artifacts)).decode()
        resource = types.BlobResourceContents(uri=uri, mime_type=artifact.media_type, blob=blob)
        content.append(types.EmbeddedResource(type="resource", resource=resource))
    return outcome.model_copy(update={"content": content})


def _artifacts(result: Any) -> list[Artifact]:
    items = result if isinstance(result, list) and result else [result]
    if not all(isinstance(item, dict) and item.get("kind") == "artifact" for item in items):
        return []
    try:
        return [Artifact.model_validate(item) for item in items]
    except ValidationError:
        return []
