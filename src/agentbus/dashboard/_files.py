"""A plan's files: the artifacts its steps returned, listed on its card, downloaded from here.

The leader names a step's artifacts in its ``succeeded`` transition (the references: the
bytes stay where they were stored). The download reads them through the dashboard's bus,
as its broker user (the generated definitions let a dashboard read the team's artifact
streams), checked against size and SHA-256: an object that turns out short or corrupt ends
the download early, so the browser reports a failed download, never wrong bytes. The file
is sent as an attachment, in a sandbox, whatever its media type: nothing from an agent runs
in the dashboard's origin.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator
from typing import Any, Final

from pydantic import ValidationError
from starlette.responses import Response, StreamingResponse

from agentbus._exceptions import (
    AccessRefused,
    AgentBusError,
    ArtifactCorrupt,
    ArtifactExpired,
    ArtifactMissing,
)
from agentbus._logging import get_logger
from agentbus.bus import Transport
from agentbus.dashboard._http import HEADERS, error
from agentbus.envelopes import ArtifactRef

__all__ = ["PlanFiles", "download"]

_KEPT: Final = 100  # references kept a plan (the first ones: a page, not an archive)

_log = get_logger("agentbus.dashboard")


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


async def download(bus: Transport, ref: ArtifactRef) -> Response:
    """The object's bytes as an attachment, or a clear error before any byte is sent (the
    generator has ended when it raises)."""
    chunks = bus.artifacts.open(ref)
    try:
        first = await anext(chunks, b"")
    except (ArtifactMissing, ArtifactExpired) as exc:
        return error(410 if isinstance(exc, ArtifactExpired) else 404, str(exc))
    except AccessRefused as exc:
        return error(403, f"the dashboard's broker user may not read it: {exc}")
    except (ArtifactCorrupt, AgentBusError) as exc:
        return error(502, f"{type(exc).__name__}: {exc}")

    async def body() -> AsyncIterator[bytes]:
        try:
            yield first
            async for chunk in chunks:
                yield chunk
        except AgentBusError as exc:  # the length falls short: the download fails
            _log.warning("download cut", artifact=ref.id, error=f"{type(exc).__name__}: {exc}")
        finally:
            close = getattr(chunks, "aclose", None)  # a client gone: the reader stops
            if close is not None:
                await close()

    quoted = urllib.parse.quote(ref.name, safe="")
    headers = HEADERS | {
        "Content-Length": str(ref.size),
        "Content-Disposition": f"attachment; filename*=UTF-8''{quoted}",
        "Content-Security-Policy": "sandbox",
        "Cache-Control": "no-store",
        "X-Artifact-SHA256": ref.sha256,
    }
    return StreamingResponse(body(), media_type="application/octet-stream", headers=headers)
