"""Artifacts across sites, without a broker: the pieces a reader takes, in order and
counted; the homes it asks; what the sending side refuses."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import Callable
from typing import Any

import pytest

from agentbus import (
    AccessRefused,
    ArtifactCorrupt,
    ArtifactMissing,
    InvalidParameters,
    RemoteError,
    Settings,
    Unroutable,
)
from agentbus.bus import Topology
from agentbus.bus._artifacts_across import fetch_across, send_artifact  # the seam under test
from agentbus.bus._stores._artifact_store import verified
from agentbus.envelopes import (
    ARTIFACT_PIECE,
    ArtifactRef,
    ErrorCode,
    RequestEnvelope,
    ResponseEnvelope,
    ResponseStatus,
    utcnow,
)
from agentbus.testing import MemoryBroker, MemoryBus

DATA = bytes(range(256)) * 40


def _ref(**changes: Any) -> ArtifactRef:
    fields: dict[str, Any] = {
        "id": "0" * 32,
        "store": "stream",
        "location": "agentbus.artifacts.maker.client@7",
        "name": "f.bin",
        "size": len(DATA),
        "sha256": hashlib.sha256(DATA).hexdigest(),
        "owner": "maker-1",
        "reader": "client",
        "created_at": utcnow(),
        "site": "a",
    }
    return ArtifactRef.model_validate(fields | changes)


def _request(sender: str = "client-1", artifact: Any = None) -> RequestEnvelope:
    return RequestEnvelope.model_validate(
        {
            "sender_id": sender,
            "receiver_id": "maker-1",
            "payload": {"action": "read_artifact", "parameters": {"artifact": artifact}},
        }
    )


def _notice(seq: int, data: bytes) -> ResponseEnvelope:
    piece = {"state": ARTIFACT_PIECE, "seq": seq, "data": base64.b64encode(data).decode()}
    return _request().response(piece, sender_id="maker-1", status=ResponseStatus.IN_PROGRESS)


def _home(order: list[int], asked: list[str], *, counted: int | None = None) -> Callable[..., Any]:
    """A fake ``bus.request`` for the home: pieces in ``order``, then the count."""
    pieces = [DATA[n : n + 1000] for n in range(0, len(DATA), 1000)]

    async def ask(receiver: str, action: str, parameters: dict[str, Any], **kw: Any) -> Any:
        asked.append(receiver)
        for seq in order:
            kw["on_progress"](_notice(seq, pieces[seq]))
            await asyncio.sleep(0)
        count = len(order) if counted is None else counted
        return _request().response({"pieces": count}, sender_id="maker-1")

    return ask


async def _read(ask: Callable[..., Any], ref: ArtifactRef) -> bytes:
    return b"".join([chunk async for chunk in verified(ref, fetch_across(ask, ref))])


async def test_the_pieces_are_the_object_whole_and_checked() -> None:
    asked: list[str] = []
    assert await _read(_home(list(range(11)), asked), _ref()) == DATA
    assert asked == ["maker-1"]


@pytest.mark.parametrize(
    ("order", "counted"),
    [([0, 2, 1, *range(3, 11)], None), (list(range(10)), 11), (list(range(11)), 12)],
    ids=["out-of-order", "one-lost-at-the-end", "the-count-disagrees"],
)
async def test_a_lost_or_misordered_piece_is_corrupt_never_bytes(
    order: list[int], counted: int | None
) -> None:
    with pytest.raises(ArtifactCorrupt):
        await _read(_home(order, [], counted=counted), _ref())


async def test_a_home_that_does_not_route_is_passed_for_its_service() -> None:
    """The owner's instance is gone: its service (the owner's user) sends it."""
    asked: list[str] = []
    home = _home(list(range(11)), asked)

    async def ask(receiver: str, *args: Any, **kw: Any) -> Any:
        if receiver == "maker-1":
            asked.append(receiver)
            raise Unroutable("nothing serves maker-1")
        return await home(receiver, *args, **kw)

    assert await _read(ask, _ref()) == DATA
    assert asked == ["maker-1", "maker"]


async def test_no_home_answering_is_artifact_missing() -> None:
    async def ask(receiver: str, *args: Any, **kw: Any) -> Any:
        raise Unroutable(f"nothing serves {receiver}")

    with pytest.raises(ArtifactMissing, match="neither maker-1 nor maker"):
        await _read(ask, _ref())


@pytest.mark.parametrize(
    ("code", "raised"),
    [("unauthorized", AccessRefused), ("artifact_missing", ArtifactMissing)],
)
async def test_the_homes_refusal_is_raised_as_its_own_error(
    code: str, raised: type[Exception]
) -> None:
    async def ask(receiver: str, *args: Any, **kw: Any) -> Any:
        raise RemoteError(_request().error(ErrorCode(code), "no", sender_id="maker-1"))

    with pytest.raises(raised):
        await _read(ask, _ref())


def test_an_artifact_streams_pair_is_its_writer_and_reader() -> None:
    topology = Topology("agentbus")
    assert topology.artifact_pair("agentbus.artifacts.maker.client") == ("maker", "client")
    for other in ["agentbus.artifacts.maker", "other.artifacts.a.b", "agentbus.artifacts.a.b.c"]:
        assert topology.artifact_pair(other) is None


class _Home:
    """What ``send_artifact`` needs of a bus, at site a."""

    def __init__(self) -> None:
        self.settings = Settings(site="a", peer_sites="b")


@pytest.mark.parametrize(
    ("sender", "artifact", "raised"),
    [
        ("other-1", _ref().wire(), AccessRefused),  # not one of the pair maker.client
        ("client-1", _ref(site="b").wire(), ArtifactMissing),  # held at another site
        ("client-1", _ref(store="s3").wire(), ArtifactMissing),  # not on a stream
        ("client-1", {"kind": "artifact"}, InvalidParameters),  # not a reference
    ],
)
async def test_the_home_sends_only_its_own_to_one_of_the_pair(
    sender: str, artifact: Any, raised: type[Exception]
) -> None:
    with pytest.raises(raised):
        await send_artifact(_Home(), _request(sender, artifact), "maker-1")  # type: ignore[arg-type]


async def test_a_bus_with_peer_sites_answers_read_artifact_itself_whatever_it_serves() -> None:
    """Its handler gets every other request; ``read_artifact`` is the bus's, served or not."""
    broker = MemoryBroker()
    at_a = Settings(site="a", peer_sites="b")
    handled: list[str] = []

    async def handler(request: RequestEnvelope) -> str:
        handled.append(request.payload.action)
        return "handled"

    async with (
        MemoryBus(broker, at_a, agent_id="served-1") as served,
        MemoryBus(broker, at_a, agent_id="plain-1"),
        MemoryBus(broker, at_a, agent_id="client-1") as client,
    ):
        await served.serve(handler)
        for home in ("served-1", "plain-1"):
            with pytest.raises(RemoteError) as refused:
                await client.request(home, "read_artifact", {"artifact": {}}, timeout=5)
            assert refused.value.code == "invalid_parameters"
        assert (await client.request("served-1", "echo", timeout=5)).result == "handled"
        with pytest.raises(RemoteError) as unserved:
            await client.request("plain-1", "echo", timeout=5)
        assert unserved.value.code == "agent_unavailable"
    assert handled == ["echo"]
