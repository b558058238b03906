"""Helpers for the shared scenarios: the transport factory's type."""

from __future__ import annotations

from typing import Any, Protocol

from agentbus.bus import Transport


class TransportFactory(Protocol):
    async def __call__(self, agent_id: str | None = None, **settings: Any) -> Transport: ...
