"""What every HTTP face is told: where it listens, who may call it, how many processes,
and the services it follows on the bus."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from agentbus._http._keys import ApiKeys

__all__ = ["HttpSettings", "keys_of"]


class HttpSettings(BaseSettings):
    """The settings the HTTP faces share; each face's own extend them under its prefix
    (``AGENTBUS_GATEWAY_*``, ``AGENTBUS_MCP_*``) and give the port its default."""

    # Never read on its own (the port has no default here): a face names its prefix.
    model_config = SettingsConfigDict(env_prefix="AGENTBUS_HTTP_", extra="ignore", frozen=True)

    host: str = "127.0.0.1"
    """The address to listen on."""
    port: int = Field(ge=0, le=65535)
    """The port to listen on (each face gives its default)."""
    keys_file: str | None = None
    """A JSON object: API key -> bus identity (or {"identity": ..., "url": ...})."""
    allow_anonymous: bool = False
    """Without keys: every caller is the identity ``anonymous`` (for local use only)."""
    workers: int = Field(default=1, ge=1)
    """Processes serving one address (``--workers N``); each face says what more than
    one needs, or changes."""
    registry: str = "registry"
    """The registry service the face follows for the live agents and their cards."""
    leader: str = "leader"
    """The leader service: the plans sent to it are followed (their progress told)."""
    refresh_interval: float = Field(default=1.0, gt=0)
    """Seconds between looks at the registry (online/offline events also trigger one)."""
    request_timeout: float = Field(default=300.0, gt=0)
    """Seconds a call waits for its bus answer (a plan's own deadline still applies)."""


def keys_of(config: HttpSettings) -> ApiKeys:
    """Return the API keys ``config`` names (its keys file), or anonymous callers.

    Raises:
        ConfigurationError: the keys file cannot be read or is malformed.
    """
    if config.keys_file is not None:
        return ApiKeys.from_file(config.keys_file)
    return ApiKeys({}, allow_anonymous=True)
