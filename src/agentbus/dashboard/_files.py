"""A plan's files: the artifacts its steps returned, listed on its card.

The leader names a step's artifacts in its ``succeeded`` transition (the references: the
bytes stay where they were stored); ``_download`` sends one to the page.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import ValidationError

from agentbus.envelopes import ArtifactRef

__all__ = ["PlanFiles"]

_KEPT: Final = 100  # references kept a plan (the first ones: a page, not an archive)


class PlanFiles:
    """The artifacts of one plan's steps, in the order they were told."""

    def __init__(self) -> None:
        self._by_id: dict[str, tuple[str, ArtifactRef]] = {}
        self.left_out = 0

    def __len__(self) -> int:
        return len(self._by_id)

    def take(self, step: str, detail: dict[str, Any] | None) -> None:
        """Keep the references a ``succeeded`` transition's ``detail`` names."""
        refs = (detail or {}).get("artifacts")
        for value in refs if isinstance(refs, list) else ():
            try:
                ref = ArtifactRef.model_validate(value)
            except ValidationError:
                continue
            if ref.id in self._by_id:
                continue
            if len(self._by_id) >= _KEPT:
                self.left_out += 1
                continue
            self._by_id[ref.id] = (step, ref)

    def get(self, artifact_id: str) -> ArtifactRef | None:
        """The reference of ``artifact_id``, if a step of this plan returned it."""
        kept = self._by_id.get(artifact_id)
        return None if kept is None else kept[1]

    def view(self) -> list[dict[str, Any]]:
        """What the page lists: no location (the dashboard reads it, not the browser)."""
        return [
            {
                "step": step,
                "id": ref.id,
                "name": ref.name,
                "media_type": ref.media_type,
                "size": ref.size,
                "sha256": ref.sha256,
                "expires_at": None if ref.expires_at is None else ref.expires_at.isoformat(),
            }
            for step, ref in self._by_id.values()
        ]
