"""The dashboard's settings: where it listens and the token that allows actions."""

from __future__ import annotations

import secrets

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["DashboardSettings"]


class DashboardSettings(BaseSettings):
    """``AGENTBUS_DASHBOARD_*`` environment variables; the CLI's options override them."""

    model_config = SettingsConfigDict(env_prefix="AGENTBUS_DASHBOARD_", extra="ignore")

    host: str = "127.0.0.1"
    """Where to listen: localhost by default; the page shows the team to whoever reaches it."""
    port: int = Field(default=8470, ge=0, le=65535)
    token: SecretStr | None = None
    """The token that allows actions (cancel, replay, discard); None: the page is read-only."""
    missed_intervals: int = Field(default=3, ge=1)
    """Missed heartbeat intervals after which an agent is shown offline (as the registry)."""

    def allows(self, presented: str | None) -> bool:
        """Whether ``presented`` is the action token (compared in constant time)."""
        if self.token is None or not presented:
            return False
        return secrets.compare_digest(presented.encode(), self.token.get_secret_value().encode())
