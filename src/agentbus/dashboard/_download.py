"""A plan's file, downloaded through the dashboard.

It is read through the dashboard's bus, as its broker user (the generated definitions let
a dashboard read the team's artifact streams), checked against size and SHA-256: an object
that turns out short or corrupt ends the download early, so the browser reports a failed
download, never wrong bytes. The file is sent as an attachment, in a sandbox, whatever its
media type: nothing from an agent runs in the dashboard's origin.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator

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

__all__ = ["download"]

_log = get_logger("agentbus.dashboard")


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
