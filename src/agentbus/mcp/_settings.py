"""The MCP server's settings, read from ``AGENTBUS_MCP_*`` environment variables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from agentbus._http import HttpSettings

__all__ = ["McpSettings"]


class McpSettings(HttpSettings):
    """``agentbus mcp`` settings. Each field reads ``AGENTBUS_MCP_<NAME>``.

    Where it listens, its keys and its ``workers`` are for HTTP. With more than one worker
    the endpoint is stateless (earlier-protocol clients get no session: no notifications
    outside a call). The ``leader``'s ``run_plan`` is the tool ``run_plan``, with the plan's
    progress.
    """

    model_config = SettingsConfigDict(env_prefix="AGENTBUS_MCP_")

    transport: Literal["stdio", "http"] = "stdio"
    """``stdio`` (a desktop client starts the server) or ``http`` (Streamable HTTP)."""
    port: int = Field(default=8090, ge=0, le=65535)
    """The port to listen on (Streamable HTTP)."""
    path: str = "/mcp"
    """Where the Streamable HTTP endpoint is served."""
    max_embedded_size: int = Field(default=16 * 1024 * 1024, ge=0)
    """The largest artifact a tool result embeds (its bytes, base64 in the result); a larger
    one is named in the text, its reference in the structured content."""
