"""Artifacts on the in-memory bus: stored in chunks, read back checked, passed by reference."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentbus import (
    Agent,
    Artifact,
    ArtifactCorrupt,
    ArtifactExpired,
    ArtifactMissing,
    PayloadTooLarge,
    QuotaExceeded,
    RemoteError,
    Settings,
    UsageError,
    put_artifact,
    skill,
)
from agentbus.envelopes import (
    BY_REFERENCE,
    PROTOCOL_VERSION,
    ArtifactRef,
    RequestEnvelope,
    is_artifact_ref,
    reads_by_reference,
    utcnow,
)
from agentbus.testing import MemoryBroker, MemoryBus

CHUNK = 64 * 1024
SETTINGS = Settings(artifact_chunk_size=CHUNK, max_message_size=256 * 1024)


class Files(Agent):
    name = "files"

    @skill
    async def digest(self, document: Artifact) -> dict[str, Any]:
        """Hash a document read in chunks; say the largest chunk it was handed."""
        digest = hashlib.sha256()
        largest = 0
        async for chunk in document.open():
            digest.update(chunk)
            largest = max(largest, len(chunk))
        return {"sha256": digest.hexdigest(), "largest": largest, "name": document.name}

    @skill
    async def make(self, size: int) -> Artifact:
        """Return an artifact of ``size`` pseudo-random bytes, written a piece at a time."""
        return await put_artifact(_pieces(size), name="made.bin", media_type="application/x-test")

    @skill
    async def echo(self, items: list[str]) -> list[str]:
        return items

    @skill
    async def count(self, items: list[str]) -> int:
        return len(items)


async def _pieces(size: int, piece: int = 10_000) -> AsyncIterator[bytes]:
    seed = b"agentbus"
    sent = 0
    while sent < size:
        seed = hashlib.sha256(seed).digest()
        block = (seed * (piece // len(seed) + 1))[: min(piece, size - sent)]
        sent += len(block)
        yield block


def _expected(size: int) -> bytes:
    return b"".join(_sync_pieces(size))


def _sync_pieces(size: int, piece: int = 10_000) -> list[bytes]:
    seed, out, sent = b"agentbus", [], 0
    while sent < size:
        seed = hashlib.sha256(seed).digest()
        block = (seed * (piece // len(seed) + 1))[: min(piece, size - sent)]
        sent += len(block)
        out.append(block)
    return out


def _names(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


@pytest.fixture
async def team() -> AsyncIterator[tuple[MemoryBroker, MemoryBus]]:
    broker = MemoryBroker()
    async with (
        MemoryBus(broker, SETTINGS, agent_id="files-1") as server_bus,
        Files(bus=server_bus, settings=SETTINGS),
        MemoryBus(broker, SETTINGS, agent_id="client-1") as client,
    ):
        yield broker, client


async def test_an_artifact_is_stored_in_chunks_and_read_back_whole() -> None:
    """Bytes go in as chunks of the set size and come back equal, with their digest."""
    broker = MemoryBroker()
    async with MemoryBus(broker, SETTINGS, agent_id="alpha-1") as bus:
        data = os.urandom(3 * CHUNK + 17)
        artifact = await bus.artifacts.put(data, name="blob.bin", reader="beta")
        assert artifact.size == len(data)
        assert artifact.sha256 == hashlib.sha256(data).hexdigest()
        assert (artifact.owner, artifact.reader, artifact.store) == ("alpha-1", "beta", "memory")
        assert broker.artifacts.readers(artifact) == ("alpha", "beta")
        chunks = [chunk async for chunk in bus.artifacts.open(artifact)]
        assert [len(c) for c in chunks] == [CHUNK, CHUNK, CHUNK, 17]
        assert await artifact.read(via=bus.artifacts) == data


async def test_an_empty_artifact_reads_back_empty() -> None:
    """Zero bytes are an object too: size 0, the digest of nothing."""
    async with MemoryBus(MemoryBroker(), SETTINGS) as bus:
        artifact = await bus.artifacts.put(b"", name="empty")
        assert artifact.sha256 == hashlib.sha256(b"").hexdigest()
        assert await bus.artifacts.read(artifact) == b""


async def test_a_corrupt_artifact_fails_before_its_last_chunk_is_handed_over() -> None:
    """A flipped bit: the reader gets ArtifactCorrupt instead of the end, never all the bytes."""
    broker = MemoryBroker()
    async with MemoryBus(broker, SETTINGS) as bus:
        artifact = await bus.artifacts.put(os.urandom(2 * CHUNK + 1), name="blob")
        broker.artifacts.corrupt(artifact)
        handed: list[bytes] = []

        async def take_all() -> None:
            async for chunk in bus.artifacts.open(artifact):
                handed.append(chunk)

        with pytest.raises(ArtifactCorrupt, match="not to be trusted"):
            await take_all()
        assert sum(map(len, handed)) < artifact.size
        with pytest.raises(ArtifactCorrupt):
            await bus.artifacts.read(artifact)


async def test_a_reference_that_lies_about_the_size_is_corrupt() -> None:
    """A reference whose size differs from the bytes stored is refused, shorter or longer."""
    async with MemoryBus(MemoryBroker(), SETTINGS) as bus:
        artifact = await bus.artifacts.put(b"x" * 100, name="blob")
        for size in (99, 101):
            lying = Artifact.model_validate({**artifact.model_dump(), "size": size})
            with pytest.raises(ArtifactCorrupt):
                await bus.artifacts.read(lying)


async def test_a_missing_artifact_is_a_clear_error() -> None:
    """An object the store no longer has: ArtifactMissing, with its id and reason."""
    broker = MemoryBroker()
    async with MemoryBus(broker, SETTINGS) as bus:
        artifact = await bus.artifacts.put(b"data", name="gone")
        broker.artifacts.drop(artifact)
        with pytest.raises(ArtifactMissing) as caught:
            await bus.artifacts.read(artifact)
        assert caught.value.code == "artifact_missing"
        assert caught.value.details["reason"] == "missing"


async def test_an_expired_artifact_is_refused_without_reading() -> None:
    """Past its expires_at an artifact is ArtifactExpired, even where bytes remain."""
    async with MemoryBus(MemoryBroker(), SETTINGS) as bus:
        artifact = await bus.artifacts.put(b"data", name="old")
        old = Artifact.model_validate(
            {**artifact.model_dump(), "expires_at": utcnow() - timedelta(seconds=1)}
        )
        with pytest.raises(ArtifactExpired) as caught:
            await bus.artifacts.read(old)
        assert caught.value.details["reason"] == "expired"
        assert isinstance(caught.value, ArtifactMissing)


async def test_retention_sets_when_an_artifact_expires() -> None:
    """expires_at is created_at plus the artifact_retention setting."""
    settings = SETTINGS.model_copy(update={"artifact_retention": "2h"})
    async with MemoryBus(MemoryBroker(), settings) as bus:
        artifact = await bus.artifacts.put(b"data", name="kept")
        assert artifact.expires_at is not None
        assert artifact.expires_at - artifact.created_at == timedelta(hours=2)


async def test_the_quota_refuses_what_an_owner_cannot_keep() -> None:
    """Over artifact_quota a put fails with QuotaExceeded, and nothing is referenced."""
    settings = SETTINGS.model_copy(update={"artifact_quota": 1000})
    broker = MemoryBroker()
    async with MemoryBus(broker, settings) as bus:
        await bus.artifacts.put(b"x" * 600, name="first")
        with pytest.raises(QuotaExceeded) as caught:
            await bus.artifacts.put(b"x" * 600, name="second")
        assert caught.value.code == "quota_exceeded"
        await bus.artifacts.put(b"x" * 400, name="fits")
        assert bus.artifacts.used() == 1000
        with pytest.raises(QuotaExceeded, match="quota"):
            await bus.artifacts.put(b"x", name="full")
        assert len(broker.artifacts) == 2


async def test_the_largest_size_stops_a_stream_while_it_is_written() -> None:
    """An object over artifact_max_size fails as it passes the size, not after."""
    settings = SETTINGS.model_copy(update={"artifact_max_size": 100_000})
    pulled = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal pulled
        while True:
            pulled += 10_000
            yield b"y" * 10_000

    async with MemoryBus(MemoryBroker(), settings) as bus:
        with pytest.raises(QuotaExceeded) as caught:
            await bus.artifacts.put(endless(), name="endless")
        assert caught.value.details["limit"] == "max_size"
        assert pulled < 100_000 + 2 * CHUNK


async def test_a_file_goes_in_and_is_saved_out(tmp_path: Path) -> None:
    """A path is read a piece at a time; save writes the checked bytes, then renames."""
    source = tmp_path / "in.bin"
    source.write_bytes(os.urandom(200_000))
    async with MemoryBus(MemoryBroker(), SETTINGS) as bus:
        artifact = await bus.artifacts.put(source, name="in.bin")
        saved = await artifact.save(tmp_path / "out.bin", via=bus.artifacts)
        assert saved.read_bytes() == source.read_bytes()
        assert _names(tmp_path) == ["in.bin", "out.bin"]


async def test_a_corrupt_artifact_is_never_saved(tmp_path: Path) -> None:
    """save leaves no file behind when the bytes fail their check."""
    broker = MemoryBroker()
    async with MemoryBus(broker, SETTINGS) as bus:
        artifact = await bus.artifacts.put(os.urandom(3 * CHUNK), name="blob")
        broker.artifacts.corrupt(artifact)
        with pytest.raises(ArtifactCorrupt):
            await bus.artifacts.save(artifact, tmp_path / "out.bin")
        assert _names(tmp_path) == []


async def test_reading_outside_a_skill_needs_a_bus() -> None:
    """Artifact.open outside a skill, without via: a UsageError that says what to do."""
    async with MemoryBus(MemoryBroker(), SETTINGS) as bus:
        artifact = await bus.artifacts.put(b"data", name="x")
        with pytest.raises(UsageError, match="via="):
            await artifact.read()
        with pytest.raises(UsageError, match="inside a skill"):
            await put_artifact(b"data", name="y")


async def test_a_skill_takes_an_artifact_and_reads_it_in_chunks(
    team: tuple[MemoryBroker, MemoryBus],
) -> None:
    """A parameter typed Artifact arrives as a reference the skill reads chunk by chunk."""
    _, client = team
    data = os.urandom(5 * CHUNK)
    document = await client.artifacts.put(data, name="doc.bin", reader="files")
    reply = await client.request("files", "digest", {"document": document.wire()}, timeout=5)
    assert reply.result == {
        "sha256": hashlib.sha256(data).hexdigest(),
        "largest": CHUNK,
        "name": "doc.bin",
    }


async def test_a_skill_returns_an_artifact_its_caller_reads(
    team: tuple[MemoryBroker, MemoryBus],
) -> None:
    """put_artifact inside a skill stores for the requester; the result is the reference."""
    broker, client = team
    reply = await client.request("files", "make", {"size": 300_000}, timeout=5)
    assert is_artifact_ref(reply.result)
    artifact = Artifact.model_validate(reply.result)
    assert (artifact.name, artifact.media_type, artifact.owner) == (
        "made.bin",
        "application/x-test",
        "files-1",
    )
    assert broker.artifacts.readers(artifact) == ("files", "client")
    assert await artifact.read(via=client.artifacts) == _expected(300_000)


def test_the_card_describes_an_artifact_parameter_and_result() -> None:
    """The skill's JSON Schemas name the reference's fields."""
    parameters = Files.skills["digest"].parameters_schema
    result = Files.skills["make"].result_schema
    assert {"id", "sha256", "size", "location"} <= set(
        parameters["$defs"]["Artifact"]["properties"]
    )
    assert {"id", "sha256", "size", "location"} <= set(result["properties"])


async def test_parameters_over_the_cap_go_by_reference(
    team: tuple[MemoryBroker, MemoryBus],
) -> None:
    """A request whose envelope is over the cap is sent with its parameters by reference;
    the skill gets them whole, and its large result comes back by reference too."""
    broker, client = team
    items = [f"item-{i:06d}" for i in range(40_000)]  # about 600 KB of JSON
    reply = await client.request("files", "echo", {"items": items}, timeout=5)
    assert reply.result == items
    assert not (reply.metadata.model_extra or {}).get(BY_REFERENCE)
    assert len(broker.artifacts) == 2  # the parameters, and the result


async def test_a_small_result_of_large_parameters_comes_inline(
    team: tuple[MemoryBroker, MemoryBus],
) -> None:
    """Only what is over the cap goes by reference."""
    broker, client = team
    items = [f"item-{i:06d}" for i in range(40_000)]
    reply = await client.request("files", "count", {"items": items}, timeout=5)
    assert reply.result == 40_000
    assert len(broker.artifacts) == 1


async def test_without_by_reference_a_large_request_is_refused() -> None:
    """artifact_by_reference=False keeps the 1.2 behaviour: PayloadTooLarge."""
    settings = SETTINGS.model_copy(update={"artifact_by_reference": False})
    async with MemoryBus(MemoryBroker(), settings) as client:
        with pytest.raises(PayloadTooLarge):
            await client.request("files", "echo", {"items": ["x" * 300_000]}, timeout=1)


async def test_a_caller_before_1_3_is_answered_payload_too_large(
    team: tuple[MemoryBroker, MemoryBus],
) -> None:
    """A result by reference goes only to callers that read it (1.3 and later)."""
    _, client = team
    items = [f"item-{i:06d}" for i in range(40_000)]
    old = RequestEnvelope.model_validate(
        {
            "protocol_version": "1.2",
            "sender_id": client.agent_id,
            "receiver_id": "files",
            "payload": {"action": "make_list", "parameters": {}},
        }
    )
    assert not reads_by_reference(old)
    assert reads_by_reference(old.model_copy(update={"protocol_version": PROTOCOL_VERSION}))
    request = RequestEnvelope.model_validate(
        {
            "protocol_version": "1.2",
            "sender_id": client.agent_id,
            "receiver_id": "files",
            "payload": {"action": "echo", "parameters": {"items": items[:10]}},
        }
    )
    reply = await client.send_request(request, timeout=5)
    assert reply.result == items[:10]
    big = RequestEnvelope.model_validate(
        {
            **request.model_dump(exclude={"message_id"}),
            "payload": {"action": "echo", "parameters": {"items": items}},
        }
    )
    with pytest.raises(RemoteError) as caught:
        await client.send_request(big, timeout=5)
    assert caught.value.code == "payload_too_large"


async def test_parameters_whose_artifact_is_gone_are_answered_artifact_missing(
    team: tuple[MemoryBroker, MemoryBus],
) -> None:
    """The receiver cannot read the parameters: an error envelope says so, nothing runs."""
    broker, client = team
    stored = await client.artifacts.put(orjson.dumps({"items": ["a"]}), name="p", reader="files")
    broker.artifacts.drop(stored)
    request = RequestEnvelope.model_validate(
        {
            "sender_id": client.agent_id,
            "receiver_id": "files",
            "payload": {"action": "count", "parameters": stored.wire()},
            "metadata": {BY_REFERENCE: True},
        }
    )
    with pytest.raises(RemoteError) as caught:
        await client.send_request(request, timeout=5)
    assert caught.value.code == "artifact_missing"


def test_a_reference_keeps_fields_it_does_not_know() -> None:
    """Tolerant reader: a newer writer's fields pass through a reference unchanged."""
    ref = ArtifactRef.model_validate(
        {
            "id": "0" * 32,
            "store": "stream",
            "location": "agentbus.artifacts.a.b@0",
            "name": "x",
            "size": 1,
            "sha256": "0" * 64,
            "owner": "a-1",
            "created_at": "2026-11-28T00:00:00Z",
            "thumbnail": "later",
        }
    )
    assert ref.wire()["thumbnail"] == "later"
    assert is_artifact_ref(ref.wire())
    assert not is_artifact_ref({"kind": "artifact"})
