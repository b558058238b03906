"""Artifacts on the in-memory broker: what the broker's streams are to the real bus.

Every bus on one ``MemoryBroker`` shares its ``MemoryArtifacts``: objects kept as their
chunks, with what a test needs to make the failures a reader must survive (a corrupt
byte, a lost object, retention that has passed).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentbus._exceptions import ArtifactMissing
from agentbus.bus.internal import ArtifactStore, Placement, Tally, new_artifact_id
from agentbus.envelopes import ArtifactRef

__all__ = ["MemoryArtifactStore", "MemoryArtifacts"]


@dataclass(slots=True)
class _Object:
    writer: str
    reader: str
    chunks: list[bytes] = field(default_factory=list)


class MemoryArtifacts:
    """The artifacts kept on a ``MemoryBroker``, by id (``broker.artifacts``)."""

    def __init__(self) -> None:
        self._objects: dict[str, _Object] = {}

    def __repr__(self) -> str:
        return f"<MemoryArtifacts objects={len(self._objects)}>"

    def __len__(self) -> int:
        return len(self._objects)

    @property
    def stored_bytes(self) -> int:
        """The bytes of every object kept."""
        return sum(len(c) for obj in self._objects.values() for c in obj.chunks)

    def corrupt(self, ref: ArtifactRef) -> None:
        """Flip a bit of the object's first byte, as a disk or a bug might."""
        chunks = self._objects[ref.id].chunks
        first = next(i for i, chunk in enumerate(chunks) if chunk)
        chunks[first] = bytes([chunks[first][0] ^ 1]) + chunks[first][1:]

    def drop(self, ref: ArtifactRef) -> None:
        """Lose the object, as retention or a deletion does."""
        del self._objects[ref.id]

    def readers(self, ref: ArtifactRef) -> tuple[str, str]:
        """The broker users the object was stored by and for."""
        found = self._objects[ref.id]
        return found.writer, found.reader


class MemoryArtifactStore:
    """A bus's view of its broker's ``MemoryArtifacts``: the in-memory ``ArtifactStore``."""

    kind = "memory"

    def __init__(self, artifacts: MemoryArtifacts, *, chunk_size: int) -> None:
        self.chunk_size = chunk_size
        self._artifacts = artifacts

    async def put(self, chunks: AsyncIterator[bytes], placement: Placement) -> ArtifactRef:
        """Keep the object's chunks; return its reference."""
        kept = _Object(placement.writer, placement.reader)
        tally = Tally(placement.max_size)
        async for chunk in chunks:
            tally.add(chunk)
            kept.chunks.append(chunk)
        artifact_id = new_artifact_id()
        self._artifacts._objects[artifact_id] = kept
        return placement.ref(artifact_id, self.kind, f"memory://{artifact_id}", tally)

    async def chunks(self, ref: ArtifactRef) -> AsyncIterator[bytes]:
        """Yield the object's chunks as kept."""
        found = self._artifacts._objects.get(ref.id)
        if found is None:
            raise ArtifactMissing(
                f"artifact {ref.id} ({ref.name!r}) is not kept here",
                details={"artifact_id": ref.id, "reason": "missing"},
            )
        for chunk in list(found.chunks):
            yield chunk

    async def delete(self, ref: ArtifactRef) -> bool:
        """Forget the object; return whether it was kept."""
        return self._artifacts._objects.pop(ref.id, None) is not None

    async def aclose(self) -> None:
        """Nothing to release."""


if TYPE_CHECKING:  # mypy proves the store fits the seam

    def _conforms(store: MemoryArtifactStore) -> ArtifactStore:
        return store
