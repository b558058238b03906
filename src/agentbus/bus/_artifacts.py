"""Artifacts as a program sees them: the ``Artifact`` type, a bus's ``Artifacts``, and
``put_artifact`` for skills (docs/artifacts.md).

An artifact is stored once, for one reader (a broker user), and passed by reference; it
is read back in chunks, never whole in memory unless asked (``read``), and its bytes are
checked against its size and SHA-256 before the last chunk is handed over.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from agentbus._config import Settings
from agentbus._exceptions import QuotaExceeded, UsageError
from agentbus.bus._stores._artifact_store import (
    ArtifactStore,
    Placement,
    Source,
    rechunk,
    retention_of,
    verified,
)
from agentbus.envelopes import ArtifactRef, utcnow
from agentbus.security import acting_user, owner_of

__all__ = [
    "Artifact",
    "Artifacts",
    "artifact_of",
    "artifact_scope",
    "put_artifact",
    "reader_of",
]

_FILE_PIECE: Final = 1024 * 1024  # bytes read from a file at a time


class Artifact(ArtifactRef):
    """A file or a large payload, passed by reference: what a skill takes and returns.

    A parameter typed ``Artifact`` arrives as the reference; its bytes are read when the
    skill asks, in chunks (``open``), whole (``read``) or into a file (``save``), each
    checked against the artifact's size and SHA-256::

        @skill
        async def count_lines(self, document: Artifact) -> int:
            lines = 0
            async for chunk in document.open():
                lines += chunk.count(b"\\n")
            return lines

    Inside a skill the agent's bus reads it; elsewhere pass ``via`` (``bus.artifacts``).
    """

    def open(self, via: Artifacts | None = None) -> AsyncIterator[bytes]:
        """Yield the artifact's bytes in chunks; the last one only once all check.

        Raises:
            ArtifactMissing: the store has no such object (``ArtifactExpired``: no more).
            ArtifactCorrupt: the bytes fail the size or digest (instead of the last chunk).
            AccessRefused: this identity may not read it.
            UsageError: outside a skill, without ``via``.
        """
        return _access(via).open(self)

    async def read(self, via: Artifacts | None = None) -> bytes:
        """Return the artifact's bytes, checked (as ``open``; the whole object in memory)."""
        return await _access(via).read(self)

    async def save(self, path: str | os.PathLike[str], via: Artifacts | None = None) -> Path:
        """Write the artifact to ``path`` (a file beside it, renamed once checked)."""
        return await _access(via).save(self, path)


@dataclass(frozen=True, slots=True)
class _Scope:
    artifacts: Artifacts
    reader: str | None


_scope: contextvars.ContextVar[_Scope] = contextvars.ContextVar("agentbus_artifacts")


def artifact_scope(artifacts: Artifacts, reader: str | None) -> contextvars.Token[_Scope]:
    """Make ``artifacts`` the current context's, storing for ``reader`` (a broker user) by
    default; the agent runtime does it around each skill (reader: the requester's user)."""
    return _scope.set(_Scope(artifacts, reader))


def reader_of(agent_id: str) -> str:
    """The broker user ``agent_id`` belongs to: whom an answer to it stores files for,
    unless its request names another (``metadata.artifact_reader``)."""
    return owner_of(agent_id)


def _access(via: Artifacts | None) -> Artifacts:
    if via is not None:
        return via
    try:
        return _scope.get().artifacts
    except LookupError:
        raise UsageError(
            "artifacts are read inside a skill, or through a bus: pass via=bus.artifacts"
        ) from None


async def put_artifact(
    source: Source | os.PathLike[str],
    *,
    name: str,
    media_type: str = "application/octet-stream",
    reader: str | None = None,
) -> Artifact:
    """From inside a skill: store ``source`` as an artifact its requester may read.

    Return it as (part of) the skill's result; the requester reads it by reference.
    ``source`` is bytes, an (async) iterable of bytes, or a file's path, read a chunk at
    a time. ``reader``: another broker user to store it for instead.

    Raises:
        UsageError: not called from a running skill.
        QuotaExceeded: over the owner's quota or the largest size allowed.
    """
    try:
        scope = _scope.get()
    except LookupError:
        raise UsageError(
            "put_artifact is called inside a skill; elsewhere use bus.artifacts.put"
        ) from None
    return await scope.artifacts.put(
        source, name=name, media_type=media_type, reader=reader or scope.reader
    )


class Artifacts:
    """A bus's artifacts: store them for a reader, read them back checked.

    ``bus.artifacts``, usable once the bus is open. The store is the broker's streams
    unless the ``artifact_store`` setting names another (S3).
    """

    def __init__(
        self,
        opener: Callable[[], ArtifactStore],
        settings: Settings,
        *,
        owner: str,
        across: Callable[[ArtifactRef], AsyncIterator[bytes]] | None = None,
    ) -> None:
        self.owner = owner
        """The agent id that owns what this bus stores."""
        self._opener = opener
        self._across = across  # reads an object another site's stream holds
        self._store: ArtifactStore | None = None
        self._settings = settings
        self._retention = retention_of(settings.artifact_retention)
        self._kept: list[tuple[datetime, int]] = []  # what counts against the quota

    def __repr__(self) -> str:
        kind = "unopened" if self._store is None else self._store.kind
        return f"<Artifacts owner={self.owner!r} store={kind!r}>"

    @property
    def store(self) -> ArtifactStore:
        """The store, opened on first use.

        Raises:
            BusClosed: the bus is not open.
        """
        if self._store is None:
            self._store = self._opener()
        return self._store

    @property
    def user(self) -> str:
        """The broker user this bus stores and reads as."""
        return acting_user(self._settings, self.owner)

    async def put(
        self,
        source: Source | os.PathLike[str],
        *,
        name: str,
        media_type: str = "application/octet-stream",
        reader: str | None = None,
    ) -> Artifact:
        """Store ``source`` for broker user ``reader`` (default: this bus's own) and return
        the reference, once the store has all of it.

        ``source`` is bytes, an (async) iterable of bytes, or a file's path; it is read a
        chunk at a time, so an object of any size takes a few chunks of memory.

        Raises:
            QuotaExceeded: over this owner's quota (``artifact_quota``) or over the
                largest size allowed (``artifact_max_size``).
            TransportError: the store failed; no reference names a part of it.
        """
        placement = Placement(
            name=name,
            media_type=media_type,
            owner=self.owner,
            writer=self.user,
            reader=reader or self.user,
            retention=self._retention,
            max_size=self._room(),
        )
        if isinstance(source, os.PathLike):
            source = _file_pieces(Path(source))
        chunks = rechunk(source, self.store.chunk_size)
        ref = await self.store.put(chunks, placement)
        if self._settings.site is not None and ref.store == "stream":  # this broker's alone
            ref = ref.model_copy(update={"site": self._settings.site})
        if self._settings.artifact_quota is not None and ref.expires_at is not None:
            self._kept.append((ref.expires_at, ref.size))
        return Artifact.model_validate(ref.model_dump())

    def open(self, artifact: ArtifactRef) -> AsyncIterator[bytes]:
        """Yield ``artifact``'s bytes in chunks, the last only once size and digest check.

        Raises:
            ArtifactMissing, ArtifactExpired, ArtifactCorrupt, AccessRefused: as
                ``Artifact.open``.
        """
        there = artifact.site is not None and artifact.site != self._settings.site
        if there and self._across is not None:
            return verified(artifact, self._across(artifact))
        return verified(artifact, self.store.chunks(artifact))

    async def read(self, artifact: ArtifactRef) -> bytes:
        """Return ``artifact``'s bytes, checked (the whole object in memory)."""
        parts = bytearray()
        async for chunk in self.open(artifact):
            parts += chunk
        return bytes(parts)

    async def save(self, artifact: ArtifactRef, path: str | os.PathLike[str]) -> Path:
        """Write ``artifact`` to ``path``: to a file beside it, renamed once checked."""
        target = Path(path)
        partial = target.with_name(f".{target.name}.{artifact.id}.part")
        try:
            with partial.open("wb") as file:
                async for chunk in self.open(artifact):
                    await asyncio.to_thread(file.write, chunk)
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
        return target

    async def delete(self, artifact: ArtifactRef) -> bool:
        """Delete ``artifact`` where its store can (S3, memory); return whether it did.

        On the broker's streams an object goes with its stream's retention.
        """
        return await self.store.delete(artifact)

    async def aclose(self) -> None:
        """Release the store, if it was opened."""
        if self._store is not None:
            await self._store.aclose()

    def used(self) -> int:
        """Bytes this owner stored that are not past their retention (for the quota)."""
        now = utcnow()
        self._kept = [(until, size) for until, size in self._kept if until > now]
        return sum(size for _, size in self._kept)

    def _room(self) -> int:
        largest = self._settings.artifact_max_size
        quota = self._settings.artifact_quota
        if quota is None:
            return largest
        left = quota - self.used()
        if left <= 0:
            raise QuotaExceeded(
                f"{self.owner} keeps {self.used()} bytes of artifacts, its quota is {quota}",
                details={"limit": "quota", "quota": quota, "owner": self.owner},
            )
        return min(largest, left)


async def _file_pieces(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as file:
        while piece := await asyncio.to_thread(file.read, _FILE_PIECE):
            yield piece


def artifact_of(value: Any) -> Artifact:
    """``value`` (a reference as JSON data, or an ``ArtifactRef``) as an ``Artifact``."""
    if isinstance(value, Artifact):
        return value
    if isinstance(value, ArtifactRef):
        return Artifact.model_validate(value.model_dump())
    return Artifact.model_validate(value)
