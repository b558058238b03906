"""The dashboard's settings: where it listens, the token, and who may read without it."""

from __future__ import annotations

import ipaddress
import secrets

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from agentbus._exceptions import ConfigurationError

__all__ = ["DashboardSettings", "is_loopback"]


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` reaches this machine only (``localhost``, 127/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve to anything


class DashboardSettings(BaseSettings):
    """``AGENTBUS_DASHBOARD_*`` environment variables; the CLI's options override them."""

    model_config = SettingsConfigDict(env_prefix="AGENTBUS_DASHBOARD_", extra="ignore")

    host: str = "127.0.0.1"
    """Where to listen: localhost by default; beyond it, reading needs the token too."""
    port: int = Field(default=8470, ge=0, le=65535)
    """The port to listen on."""
    token: SecretStr | None = None
    """The one token: it allows actions (cancel, replay, discard, answer) and, beyond localhost,
    reading; None: the page is read-only (and must then listen on localhost, or be public)."""
    public_read: bool = False
    """Beyond localhost, show the team to whoever reaches the page, without the token."""
    missed_intervals: int = Field(default=3, ge=1)
    """Missed heartbeat intervals after which an agent is shown offline (as the registry)."""

    @property
    def loopback(self) -> bool:
        """Whether the dashboard listens on this machine only."""
        return is_loopback(self.host)

    @property
    def reading_open(self) -> bool:
        """Whether reading needs no token: on localhost, or told ``public_read``."""
        return self.loopback or self.public_read

    def check_exposure(self) -> None:
        """Refuse a dashboard that would show the team beyond localhost to anyone by default."""
        if self.token is not None and not self.token.get_secret_value():
            raise ConfigurationError("the dashboard token is empty")
        if not self.reading_open and self.token is None:
            raise ConfigurationError(
                f"the dashboard would listen on {self.host}, beyond this machine, with no token: "
                "give one (--token-file, AGENTBUS_DASHBOARD_TOKEN) and reading needs it, "
                "or pass --public-read (AGENTBUS_DASHBOARD_PUBLIC_READ=true) to show the team "
                "to whoever reaches the page"
            )

    def allows(self, presented: str | None) -> bool:
        """Whether ``presented`` is the token (compared in constant time)."""
        if self.token is None or not presented:
            return False
        return secrets.compare_digest(presented.encode(), self.token.get_secret_value().encode())
