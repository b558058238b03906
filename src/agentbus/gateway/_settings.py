"""The gateway's settings, read from ``AGENTBUS_GATEWAY_*`` environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["GatewaySettings"]


class GatewaySettings(BaseSettings):
    """A2A gateway settings. Each field reads ``AGENTBUS_GATEWAY_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="AGENTBUS_GATEWAY_", extra="ignore", frozen=True)

    host: str = "127.0.0.1"
    """The address to listen on."""
    port: int = Field(default=8080, ge=0, le=65535)
    """The port to listen on."""
    public_url: str | None = None
    """The base URL callers reach the gateway at (cards name it); default from host and port."""
    keys_file: str | None = None
    """A JSON object: API key -> bus identity (or {"identity": ..., "url": ...})."""
    allow_anonymous: bool = False
    """Without keys: every caller is the identity ``anonymous`` (for local use only)."""
    root_service: str | None = None
    """A service served at the root too (its card at ``/.well-known/agent-card.json``, JSON-RPC
    at ``/``, HTTP+JSON at ``/rest``): for clients that discover an agent by its host."""
    registry: str = "registry"
    """The registry service the gateway follows for the live agents and their cards."""
    leader: str = "leader"
    """The leader service: its ``run_plan`` tasks stream the plan's progress."""
    refresh_interval: float = Field(default=1.0, gt=0)
    """Seconds between looks at the registry (online/offline events also trigger one)."""
    max_open_tasks: int = Field(default=256, ge=1)
    """Tasks running at once; a message beyond this is refused with an error."""
    max_tasks: int = Field(default=10_000, ge=1)
    """Tasks kept in the task store (a shared one: per caller identity); the oldest finished
    ones go first."""
    task_retention: float = Field(default=3600.0, gt=0)
    """Seconds a finished task can still be read back."""
    task_store: str | None = None
    """Where tasks are kept: None, in this process's memory; a Redis URL
    (``redis://host:6379/0``, the ``redis`` extra), shared by every gateway process that
    names it, so that any of them answers ``GetTask``, ``ListTasks``, ``CancelTask`` and
    ``SubscribeToTask`` for a task another runs."""
    workers: int = Field(default=1, ge=1)
    """Gateway processes serving one address (``agentbus gateway --workers N``); more than
    one needs a shared ``task_store``."""
    max_body_size: int = Field(default=1_048_576, ge=1)
    """The largest HTTP request body accepted, in bytes."""
    request_timeout: float = Field(default=300.0, gt=0)
    """Seconds a task waits for its bus answer (a plan's own deadline still applies)."""
