"""The agent card: who an agent is and what it can do, with JSON Schemas per skill."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from agentbus.envelopes import PROTOCOL_VERSION, AgentId

__all__ = ["AgentCard", "SkillCard"]


class SkillCard(BaseModel):
    """One skill on an agent card."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: AgentId
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)
    result: dict[str, Any] = Field(default_factory=dict)


class AgentCard(BaseModel):
    """An agent's identity and skills, as published in heartbeats and by ``describe``."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: AgentId
    name: AgentId
    description: str = ""
    version: str = "0.0.0"
    skills: list[SkillCard] = Field(default_factory=list)
    capacity: int = Field(default=1, ge=1)
    tags: list[str] = Field(default_factory=list)
    protocol_version: str = PROTOCOL_VERSION
    site: str | None = None
    """The site the agent runs at (the ``site`` setting); None: a team of one site."""

    @property
    def skill_names(self) -> list[str]:
        """The names of the agent's skills."""
        return [skill.name for skill in self.skills]

    def digest(self) -> str:
        """Return a short, stable digest of the card's content."""
        canonical = orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(canonical).hexdigest()[:16]
