"""Heartbeat and lifecycle event payloads: what agents tell the registry about themselves."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from agentbus.agents._card import AgentCard
from agentbus.envelopes import AgentId

__all__ = [
    "AGENT_OFFLINE",
    "AGENT_ONLINE",
    "ANNOUNCE",
    "HEARTBEAT",
    "AgentStatus",
    "Heartbeat",
    "OfflineNotice",
]

HEARTBEAT: Final = "heartbeat"
AGENT_ONLINE: Final = "agent_online"
AGENT_OFFLINE: Final = "agent_offline"
ANNOUNCE: Final = "announce"


class AgentStatus(enum.StrEnum):
    """What an agent says of its readiness."""

    READY = "ready"
    BUSY = "busy"
    DRAINING = "draining"


class Heartbeat(BaseModel):
    """The ``event_data`` of a ``heartbeat`` event."""

    model_config = ConfigDict(extra="allow")

    agent_id: AgentId
    service: AgentId
    status: AgentStatus
    in_flight: int = Field(ge=0)
    capacity: int = Field(ge=1)
    interval: float = Field(gt=0)
    card_digest: str
    card: AgentCard | None = None
    site: str | None = None
    """The site the agent runs at; left out of the beat when it has none."""
    seq: int | None = Field(default=None, ge=0)
    """The beat's number since the agent started, from 0: a gap tells beats were lost."""
    started_at: datetime | None = None
    traffic: dict[str, Any] | None = None
    """Requests served since start: ``served``, ``errors`` by code, latency ``buckets``."""


class OfflineNotice(BaseModel):
    """The ``event_data`` of an ``agent_offline`` (or ``agent_online``) event."""

    model_config = ConfigDict(extra="allow")

    agent_id: AgentId
    service: AgentId
    reason: str
    last_seen: datetime | None = None
    seq: int | None = Field(default=None, ge=0)
    """An agent's own goodbye: the number of its last heartbeat. A registry that takes a beat
    after the goodbye (beats and goodbyes come by two queues) knows it for an old one."""
