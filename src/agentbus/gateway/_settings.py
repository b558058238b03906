"""The gateway's settings, read from ``AGENTBUS_GATEWAY_*`` environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from agentbus._http import HttpSettings

__all__ = ["GatewaySettings"]


class GatewaySettings(HttpSettings):
    """A2A gateway settings. Each field reads ``AGENTBUS_GATEWAY_<NAME>``.

    More than one of its ``workers`` needs a shared ``task_store``; the ``leader``'s
    ``run_plan`` tasks stream the plan's progress.
    """

    model_config = SettingsConfigDict(env_prefix="AGENTBUS_GATEWAY_")

    port: int = Field(default=8080, ge=0, le=65535)
    """The port to listen on."""
    public_url: str | None = None
    """The base URL callers reach the gateway at (cards name it); default from host and port."""
    root_service: str | None = None
    """A service served at the root too (its card at ``/.well-known/agent-card.json``, JSON-RPC
    at ``/``, HTTP+JSON at ``/rest``): for clients that discover an agent by its host."""
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
    max_body_size: int = Field(default=1_048_576, ge=1)
    """The largest HTTP request body accepted, in bytes."""
    waiting_retention: float = Field(default=604_800.0, gt=0)
    """Seconds a task waiting for input (a question) is kept after it asked: a follow-up
    after that finds no task. Its question may close sooner (its own wait, the agents'
    question retention)."""
    push_attempts: int = Field(default=6, ge=1)
    """Tries of each push notification to a webhook, the first included."""
    push_backoff: float = Field(default=1.0, gt=0)
    """Seconds before a push notification's second try; each pause after doubles, to 60 s."""
    file_private_hosts: bool = False
    """Fetch a message's file parts from URLs at loopback, private or link-local addresses
    (refused by default, as webhooks are). For local use and tests."""
    push_private_hosts: bool = False
    """Take webhooks at loopback, private or link-local addresses (refused by default: a
    caller would make the gateway reach inside its network). For local use and tests."""
