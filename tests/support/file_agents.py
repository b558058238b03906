"""Agents that make files and read them (artifacts), for the tiers that pass files around:
``maker`` stores random bytes, ``checker`` and ``auditor`` read a file handed to them, each
with a skill of its own name (so the registry names one service for it) and ``whose``."""

from __future__ import annotations

import hashlib
import os

from agentbus import Agent, Artifact, put_artifact, skill


class Maker(Agent):
    name = "maker"

    @skill
    async def make(self, size: int) -> Artifact:
        """Store ``size`` random bytes for the caller (or the reader the request names)."""
        return await put_artifact(os.urandom(size), name="made.bin")


async def _digest(document: Artifact) -> str:
    digest = hashlib.sha256()
    async for chunk in document.open():  # a chunk at a time, checked at the end
        digest.update(chunk)
    return digest.hexdigest()


class Checker(Agent):
    name = "checker"

    @skill
    async def digest(self, document: Artifact) -> str:
        """The document's SHA-256 (refused unless it is stored for checker's user)."""
        return await _digest(document)

    @skill
    async def whose(self, document: Artifact) -> list[str | None]:
        """Who the document was stored by and for, and its SHA-256."""
        return [document.owner, document.reader, await _digest(document)]


class Auditor(Agent):
    name = "auditor"

    @skill
    async def audit(self, document: Artifact) -> str:
        """The document's SHA-256 (refused unless it is stored for auditor's user)."""
        return await _digest(document)

    @skill
    async def whose(self, document: Artifact) -> list[str | None]:
        """Who the document was stored by and for, and its SHA-256."""
        return [document.owner, document.reader, await _digest(document)]
