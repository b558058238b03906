"""The artifact stores' seam, and what every store shares: chunking, the tally, the check.

A store (the broker's streams: ``bus/_rabbitmq/_artifact_stream.py``; S3:
``_s3_artifacts.py``; in memory: ``agentbus.testing``) writes an object from an async
iterator of bytes and reads it back as one; it never holds more than a few chunks. The
bytes a store reads back go through ``verified`` before anyone sees them: the last chunk
is held until the size and the SHA-256 digest check, so a reader that takes every chunk
has taken the object whole and right, or gets ``ArtifactCorrupt`` instead of the end.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Protocol

from agentbus._exceptions import (
    ArtifactCorrupt,
    ArtifactExpired,
    ConfigurationError,
    QuotaExceeded,
)
from agentbus.envelopes import ArtifactRef, utcnow

__all__ = [
    "ArtifactStore",
    "Placement",
    "Source",
    "Tally",
    "describe",
    "expired",
    "new_artifact_id",
    "rechunk",
    "retention_of",
    "verified",
]

Source = bytes | bytearray | memoryview | AsyncIterable[bytes] | Iterable[bytes]
"""What an artifact is written from: bytes, or an (async) iterable of byte strings."""

_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "D": 86400, "M": 30 * 86400, "Y": 365 * 86400}
_RETENTION: Final = re.compile(r"^([0-9]+)(Y|M|D|h|m|s)$")


def new_artifact_id() -> str:
    """A fresh artifact id: 32 hex digits."""
    return uuid.uuid4().hex


def retention_of(age: str) -> timedelta:
    """``7D``, ``12h``, ... (RabbitMQ's ``x-max-age`` units) as a ``timedelta``.

    Raises:
        ConfigurationError: ``age`` is not of that form.
    """
    match = _RETENTION.match(age)
    if match is None:
        raise ConfigurationError(f"retention {age!r} is not like 7D, 12h or 30m")
    return timedelta(seconds=int(match[1]) * _UNITS[match[2]])


@dataclass(frozen=True, slots=True)
class Placement:
    """What is stored, by whom and for whom, and for how long.

    ``writer`` and ``reader`` are broker users: the store keeps the object where those
    two alone may read it (on the broker's streams, the stream of that pair).
    """

    name: str
    media_type: str
    owner: str
    writer: str
    reader: str
    retention: timedelta
    max_size: int

    def ref(self, artifact_id: str, store: str, location: str, tally: Tally) -> ArtifactRef:
        """The reference to the object ``tally`` counted, stored now at ``location``."""
        now = utcnow()
        return ArtifactRef(
            id=artifact_id,
            store=store,
            location=location,
            name=self.name,
            media_type=self.media_type,
            size=tally.size,
            sha256=tally.hexdigest(),
            owner=self.owner,
            reader=self.reader,
            created_at=now,
            expires_at=now + self.retention,
        )


class Tally:
    """The size and SHA-256 of bytes as they are written, within a size cap."""

    __slots__ = ("_digest", "max_size", "size")

    def __init__(self, max_size: int) -> None:
        self._digest = hashlib.sha256()
        self.size = 0
        self.max_size = max_size

    def add(self, chunk: bytes) -> None:
        """Count ``chunk``.

        Raises:
            QuotaExceeded: the object is now over ``max_size``.
        """
        self.size += len(chunk)
        if self.size > self.max_size:
            raise QuotaExceeded(
                f"the artifact is over the largest size allowed, {self.max_size} bytes",
                details={"limit": "max_size", "max_size": self.max_size},
            )
        self._digest.update(chunk)

    def hexdigest(self) -> str:
        """The SHA-256 of what was counted, in hex."""
        return self._digest.hexdigest()


async def rechunk(source: Source, size: int) -> AsyncIterator[bytes]:
    """Yield ``source``'s bytes in chunks of ``size`` (the last may be shorter).

    At most one chunk and one of ``source``'s pieces are held at a time.
    """
    if isinstance(source, bytes | bytearray | memoryview):
        view = memoryview(source)
        for start in range(0, len(view), size):
            yield bytes(view[start : start + size])
        return
    pending = bytearray()
    async for piece in _pieces(source):
        if not pending and len(piece) == size:
            yield piece  # already a chunk: no copy
            continue
        pending += piece
        while len(pending) >= size:
            yield bytes(pending[:size])
            del pending[:size]
    if pending:
        yield bytes(pending)


async def _pieces(source: AsyncIterable[bytes] | Iterable[bytes]) -> AsyncIterator[bytes]:
    if isinstance(source, AsyncIterable):
        async for piece in source:
            yield piece
    else:
        for piece in source:
            yield piece


async def verified(ref: ArtifactRef, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Yield ``chunks`` of the object ``ref`` names, holding the last back until the
    size and the digest check.

    Raises:
        ArtifactExpired: ``ref`` is past its ``expires_at``.
        ArtifactCorrupt: the bytes are more or fewer than ``ref.size``, or their digest
            is not ``ref.sha256`` (raised instead of yielding the last chunk).
    """
    expired(ref)
    digest = hashlib.sha256()
    size = 0
    held: bytes | None = None
    async for chunk in chunks:
        size += len(chunk)
        if size > ref.size:
            raise _corrupt(ref, f"more than its {ref.size} bytes")
        digest.update(chunk)
        if held is not None:
            yield held
        held = chunk
    if size != ref.size:
        raise _corrupt(ref, f"{size} bytes of its {ref.size}")
    if digest.hexdigest() != ref.sha256:
        raise _corrupt(ref, "bytes whose SHA-256 is not its digest")
    if held is not None:
        yield held


def expired(ref: ArtifactRef, now: datetime | None = None) -> None:
    """Raise ``ArtifactExpired`` if ``ref`` is past its ``expires_at``."""
    if ref.expires_at is not None and ref.expires_at <= (now or utcnow()):
        raise ArtifactExpired(
            f"artifact {ref.id} ({ref.name!r}) expired at {ref.expires_at.isoformat()}",
            details={"artifact_id": ref.id, "reason": "expired"},
        )


def _corrupt(ref: ArtifactRef, what: str) -> ArtifactCorrupt:
    return ArtifactCorrupt(
        f"artifact {ref.id} ({ref.name!r}) read back as {what}: not to be trusted",
        details={"artifact_id": ref.id, "size": ref.size, "sha256": ref.sha256},
    )


class ArtifactStore(Protocol):
    """Where artifacts are kept: writes an object from chunks, reads its chunks back."""

    kind: str
    """The reference's ``store``: ``stream``, ``s3``, ``memory``."""
    chunk_size: int
    """The size of the chunks ``put`` takes (the last may be shorter)."""

    async def put(self, chunks: AsyncIterator[bytes], placement: Placement) -> ArtifactRef:
        """Store the object ``chunks`` make (each of at most the store's chunk size) and
        return its reference once the store has all of it.

        Raises:
            QuotaExceeded: over ``placement.max_size``.
            TransportError: the store failed; nothing is readable under a reference.
        """
        ...

    def chunks(self, ref: ArtifactRef) -> AsyncIterator[bytes]:
        """Yield the object's chunks as stored, unchecked (``verified`` checks them).

        Raises:
            ArtifactMissing: the store has no such object (``ArtifactExpired``: no more).
            AccessRefused: this identity may not read it.
        """
        ...

    async def delete(self, ref: ArtifactRef) -> bool:
        """Delete the object where the store can (return whether it did)."""
        ...

    async def aclose(self) -> None:
        """Release what the store holds open."""
        ...


def describe(ref: ArtifactRef) -> dict[str, Any]:
    """What an error about ``ref`` names in its details."""
    return {"artifact_id": ref.id, "name": ref.name, "location": ref.location}
