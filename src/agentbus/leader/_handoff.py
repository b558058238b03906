"""A file the leader holds, copied for the step that takes it, under a user per service.

A step whose result steps of several services take stores its files for the leader
(``StepReaders``: one stream cannot have two readers). Where users are the services' own
(senders verified), each of those steps could not read it: before such a step is sent, the
leader copies each file stored for it into the stream of the step's user, chunk by chunk
(checked as it is read), once per file and user, and sends the copy's reference instead.
On a shared user nothing is copied: every step reads the leader's.
"""

from __future__ import annotations

from typing import Any

from agentbus.bus import Artifacts, reader_of
from agentbus.envelopes import ArtifactRef, is_artifact_ref

__all__ = ["Handoff"]


class Handoff:
    """Copies the files a plan's leader holds for the steps that take them.

    Args:
        artifacts: The leader's artifacts.
        own: The leader's broker user (the reader of the files stored for it).
        copies: Whether users are the services' own (else every step reads the leader's).
    """

    def __init__(self, artifacts: Artifacts, *, own: str, copies: bool) -> None:
        self._artifacts = artifacts
        self._own = own
        self._copies = copies
        self._made: dict[tuple[str, str], dict[str, Any]] = {}  # (object id, user): the copy

    async def parameters(self, parameters: dict[str, Any], receiver: str) -> dict[str, Any]:
        """``parameters`` with each file stored for the leader copied for ``receiver``."""
        user = reader_of(receiver)
        if not self._copies or user == self._own:
            return parameters
        changed: dict[str, Any] = {}
        for name, value in parameters.items():
            if self._held(value):
                changed[name] = await self._copy(value, user)
            elif isinstance(value, list) and any(self._held(item) for item in value):
                changed[name] = [
                    await self._copy(item, user) if self._held(item) else item for item in value
                ]
        return parameters | changed if changed else parameters

    def _held(self, value: Any) -> bool:
        return is_artifact_ref(value) and value.get("reader") == self._own

    async def _copy(self, value: dict[str, Any], user: str) -> dict[str, Any]:
        ref = ArtifactRef.model_validate(value)
        made = self._made.get((ref.id, user))
        if made is None:
            source = self._artifacts.open(ref)
            copy = await self._artifacts.put(
                source, name=ref.name, media_type=ref.media_type, reader=user
            )
            made = self._made[ref.id, user] = copy.wire()
        return made
