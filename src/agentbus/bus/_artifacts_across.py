"""Artifacts across sites: an object fetched on demand from the site whose stream holds it.

A stream is not federated: an object stored at one site is on that site's broker alone.
A reader at another site asks the bus that stored it (``read_artifact``, to the owner's
instance, else to the service of the owner's user), which reads the object at home,
checked, and sends it back as ``in_progress`` notices of one piece each (``{"state":
"artifact.piece", "seq": n, "data": <base64>}``, under the envelope's cap), in order, then
answers with how many it sent. The request crosses like any request (docs/sites.md); the
reader checks the pieces' order and count, and ``Artifacts.open`` the size and digest, so
a lost piece is an error, never wrong bytes. Only one of the pair of users the object's
stream is between may have it: the users who may read that stream at home.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError

from agentbus._exceptions import (
    AccessRefused,
    AgentBusError,
    ArtifactCorrupt,
    ArtifactMissing,
    InvalidParameters,
    RemoteError,
    Unroutable,
)
from agentbus._topology import Topology
from agentbus.envelopes import (
    ARTIFACT_PIECE,
    READ_ARTIFACT,
    ArtifactRef,
    RequestEnvelope,
    ResponseEnvelope,
    ResponseStatus,
)
from agentbus.security import owner_of

if TYPE_CHECKING:
    from agentbus.bus._protocol import Transport

__all__ = ["Ask", "fetch_across", "send_artifact"]

Ask = Callable[..., Awaitable[ResponseEnvelope]]
"""``bus.request``: sends a request and waits for its answer."""


async def send_artifact(bus: Transport, request: RequestEnvelope, agent_id: str) -> dict[str, Any]:
    """Send the artifact ``request`` names to its sender in pieces; return the count.

    Raises:
        InvalidParameters: no artifact reference in ``artifact``.
        AccessRefused: the sender's user is not one of the pair the object is stored between.
        ArtifactMissing: the object is not held at this site (or is gone).
    """
    try:
        artifact = ArtifactRef.model_validate(request.payload.parameters.get("artifact"))
    except ValidationError as exc:
        message = exc.errors()[0]["msg"]
        raise InvalidParameters(f"read_artifact takes an artifact reference: {message}") from None
    _check(bus, artifact, owner_of(request.sender_id))
    size = max(1024, (bus.settings.max_message_size - _OVERHEAD) * 3 // 4)
    sent = 0
    async for chunk in bus.artifacts.open(artifact):
        for at in range(0, len(chunk), size):
            data = base64.b64encode(chunk[at : at + size]).decode()
            piece = {"state": ARTIFACT_PIECE, "seq": sent, "data": data, "agent_id": agent_id}
            notice = request.response(piece, sender_id=agent_id, status=ResponseStatus.IN_PROGRESS)
            await bus.publish(notice, persistent=False, mandatory=False)
            sent += 1
    return {"pieces": sent, "size": artifact.size, "sha256": artifact.sha256}  # the count


def _check(bus: Transport, artifact: ArtifactRef, user: str) -> None:
    # The object must be on a stream of this site's team, between the asker and another.
    if artifact.store != "stream" or artifact.site != bus.settings.site:
        raise ArtifactMissing(
            f"artifact {artifact.id} is not on a stream at site {bus.settings.site}",
            details={"artifact_id": artifact.id, "reason": "missing", "site": artifact.site},
        )
    topology = Topology(bus.settings.exchange)
    pair = topology.artifact_pair(artifact.location.rpartition("@")[0])
    if pair is None or user not in pair:
        raise AccessRefused(
            f"artifact {artifact.id} is not stored for {user!r}",
            details={"artifact_id": artifact.id},
        )


_OVERHEAD: Final = 4096  # bytes of a piece's envelope besides its data
_FIRST_WORD: Final = 10.0  # s: a home that sends nothing in this long is passed over
_RATE: Final = 1_000_000  # bytes a second the timeout allows for, at the least
_SLACK: Final = 60.0  # seconds on top
_REMOTE: Final[dict[str, type[AgentBusError]]] = {
    "artifact_missing": ArtifactMissing,
    "artifact_corrupt": ArtifactCorrupt,
    "unauthorized": AccessRefused,
}


async def fetch_across(ask: Ask, artifact: ArtifactRef) -> AsyncIterator[bytes]:
    """Yield ``artifact``'s bytes, fetched from the site that holds it, in pieces.

    Raises:
        ArtifactMissing: neither the owner nor its service answers (the owner stopped,
            the link is down), or the object is gone at home.
        ArtifactCorrupt: a piece is missing or out of order.
        AccessRefused: the owner refuses this reader (not one of the pair).
    """
    pieces: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
    task = asyncio.create_task(_ask(ask, artifact, pieces))
    try:
        while (piece := await pieces.get()) is not None:
            if isinstance(piece, BaseException):
                raise piece
            yield piece
    finally:
        task.cancel()


async def _ask(
    ask: Ask, artifact: ArtifactRef, pieces: asyncio.Queue[bytes | BaseException | None]
) -> None:
    taken = 0
    heard = asyncio.Event()

    def on_piece(notice: ResponseEnvelope) -> None:
        nonlocal taken
        update = notice.payload.result
        if not isinstance(update, dict) or update.get("state") != ARTIFACT_PIECE:
            return
        heard.set()
        if update.get("seq") != taken:
            pieces.put_nowait(_corrupt(artifact, f"piece {update.get('seq')} came for {taken}"))
            return
        taken += 1
        pieces.put_nowait(base64.b64decode(update["data"]))

    try:
        reply = await _from_home(ask, artifact, on_piece, heard)
        sent = reply.result.get("pieces") if isinstance(reply.result, dict) else None
        if sent != taken:
            raise _corrupt(artifact, f"{taken} pieces of {sent}")
        pieces.put_nowait(None)
    except Exception as exc:  # handed to the reader, which raises it
        pieces.put_nowait(exc)


async def _from_home(
    ask: Ask,
    artifact: ArtifactRef,
    on_piece: Callable[[ResponseEnvelope], None],
    heard: asyncio.Event,
) -> ResponseEnvelope:
    parameters = {"artifact": artifact.wire()}
    timeout = _SLACK + artifact.size / _RATE
    homes = list(dict.fromkeys([artifact.owner, owner_of(artifact.owner)]))
    for home in homes:
        call = asyncio.ensure_future(
            ask(home, READ_ARTIFACT, parameters, timeout=timeout, on_progress=on_piece)
        )
        first = asyncio.ensure_future(heard.wait())
        try:  # a home that has stopped may still route: silent, it is passed over
            await asyncio.wait(
                {call, first}, timeout=_FIRST_WORD, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            first.cancel()
        if not call.done() and not heard.is_set():
            call.cancel()
            continue
        try:
            return await call
        except Unroutable:
            continue
        except RemoteError as exc:
            raise _REMOTE.get(exc.code, ArtifactMissing)(exc.message, details=exc.details) from None
    raise ArtifactMissing(
        f"artifact {artifact.id} ({artifact.name!r}) is at site {artifact.site}, and neither "
        f"{' nor '.join(homes)} answers there to send it across",
        details={"artifact_id": artifact.id, "reason": "unreachable", "site": artifact.site},
    )


def _corrupt(artifact: ArtifactRef, why: str) -> ArtifactCorrupt:
    return ArtifactCorrupt(
        f"artifact {artifact.id} ({artifact.name!r}) fetched across: {why}",
        details={"artifact_id": artifact.id},
    )
