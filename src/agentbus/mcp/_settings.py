"""The MCP server's settings, read from ``AGENTBUS_MCP_*`` environment variables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["McpSettings"]


class McpSettings(BaseSettings):
    """``agentbus mcp`` settings. Each field reads ``AGENTBUS_MCP_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="AGENTBUS_MCP_", extra="ignore", frozen=True)

    transport: Literal["stdio", "http"] = "stdio"
    """``stdio`` (a desktop client starts the server) or ``http`` (Streamable HTTP)."""
    host: str = "127.0.0.1"
    """HTTP: the address to listen on."""
    port: int = Field(default=8090, ge=0, le=65535)
    """HTTP: the port to listen on."""
    path: str = "/mcp"
    """Where the Streamable HTTP endpoint is served."""
    keys_file: str | None = None
    """The gateway's API keys file: key -> bus identity (or {"identity": ..., "url": ...})."""
    allow_anonymous: bool = False
    """Over HTTP without keys: every caller is the identity ``anonymous`` (local use only)."""
    registry: str = "registry"
    """The registry service the server follows for the live skills and their cards."""
    leader: str = "leader"
    """The leader service: its ``run_plan`` is the tool ``run_plan``, with the plan's progress."""
    refresh_interval: float = Field(default=1.0, gt=0)
    """Seconds between looks at the registry (online/offline events also trigger one)."""
    workers: int = Field(default=1, ge=1)
    """HTTP: processes serving the endpoint on one address; with more than one the endpoint
    is stateless (earlier-protocol clients get no session: no notifications outside a call)."""
    request_timeout: float = Field(default=300.0, gt=0)
    """Seconds a tool call waits for its bus answer (a plan's own deadline still applies)."""
