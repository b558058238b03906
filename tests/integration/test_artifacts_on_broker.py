"""Artifacts on the broker's streams: between agent processes, by reference, and failing clearly."""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

import aio_pika
import pytest
from helpers import BusFactory, force_close
from processes import Processes, poll

from agentbus import Artifact, ArtifactCorrupt, ArtifactExpired, ArtifactMissing
from agentbus.bus import Bus, Topology
from agentbus.bus._rabbitmq._artifact_stream import _Probe
from agentbus.envelopes import utcnow
from agentbus.leader import PlanClient

pytestmark = pytest.mark.integration

MB = 1000 * 1000
MiB = 1024 * 1024
# Either end may hold a few chunks in flight (8 MiB each way) and its buffers: a peak that
# grows less than this while 100 MB pass is flat in the object's size.
RSS_BOUND_KIB = 48 * 1024


async def test_a_100_mb_artifact_passes_between_two_agent_processes_with_flat_rss(
    procs: Processes,
) -> None:
    """One agent writes 100 MB a piece at a time, another reads them in chunks: the
    digests are equal, and neither process's peak RSS grows by more than a few chunks."""
    maker = procs.agent("Maker", "maker-1")
    digester = procs.agent("Digester", "digester-1")
    await asyncio.gather(maker.started(), digester.started())
    client = await procs.client()
    made = await client.request(
        "maker", "make", {"size": 100 * MB, "reader": "digester"}, timeout=120
    )
    artifact = Artifact.model_validate(made.result["artifact"])
    assert artifact.size == 100 * MB
    assert artifact.location.startswith(f"{procs.exchange}.artifacts.maker.digester@")
    read = await client.request("digester", "digest", {"document": artifact.wire()}, timeout=120)
    assert read.result["sha256"] == artifact.sha256
    assert read.result["size"] == 100 * MB
    for end in (made.result, read.result):
        grew = end["peak_kib"] - end["rss_kib"]
        assert grew < RSS_BOUND_KIB, f"peak RSS grew {grew} KiB for 100 MB: {end}"


async def test_a_plan_passes_one_steps_artifact_to_the_next_as_a_reference(
    procs: Processes,
) -> None:
    """A plan whose second step reads the file its first returned: the leader hands the
    reference on (the plan's record holds the reference, not the bytes), the reader gets
    the object whole, and the progress names it for the dashboard."""
    started = [procs.registry("registry-1"), procs.leader("leader-1")]
    started += [procs.agent("Maker", "maker-1"), procs.agent("Digester", "digester-1")]
    for process in started:
        await process.started()
    client = await procs.client()
    for skill_name in ("make", "digest"):
        await poll(lambda s=skill_name: _known(client, s), 10, f"the registry to know {skill_name}")
    plan = {
        "id": "files-plan",
        "subtasks": [
            {"id": "made", "skill": "make", "parameters": {"size": 5 * MB}},
            {
                "id": "dug",
                "skill": "digest",
                "depends_on": ["made"],
                "inputs": {"document": "made.artifact"},
            },
        ],
    }
    aggregate = await PlanClient(client).run(plan, timeout=60)
    assert aggregate.status.value == "completed", aggregate.error
    made = Artifact.model_validate(aggregate.subtask("made").result["artifact"])
    dug = aggregate.subtask("dug").result
    assert (dug["size"], dug["sha256"]) == (5 * MB, made.sha256)
    # Stored for the service of the step that takes it, not for the leader.
    assert made.location.startswith(f"{procs.exchange}.artifacts.maker.digester@")


async def _known(client: Bus, skill_name: str) -> bool | None:
    reply = await client.request("registry", "find_skill", {"skill": skill_name}, timeout=5)
    return True if reply.result else None


async def test_results_and_parameters_over_the_cap_go_by_reference(procs: Processes) -> None:
    """A 3 MB result comes back whole by reference; 3 MB of parameters reach a skill whole."""
    maker = procs.agent("Maker", "maker-1")
    digester = procs.agent("Digester", "digester-1")
    await asyncio.gather(maker.started(), digester.started())
    client = await procs.client()
    listed = await client.request("maker", "big_list", {"count": 200_000}, timeout=60)
    assert len(listed.result) == 200_000
    assert listed.result[-1] == "item-00199999"
    counted = await client.request("digester", "count", {"items": listed.result}, timeout=60)
    assert counted.result == 200_000


async def test_objects_written_at_once_interleave_and_read_back_apart(
    make_bus: BusFactory,
) -> None:
    """Concurrent writers to one stream interleave chunks; each object reads back alone."""
    writer = await make_bus("alpha-1", artifact_chunk_size=64 * 1024)
    reader = await make_bus("beta-1")
    blobs = [os.urandom(300_000 + n) for n in range(4)]
    artifacts = await asyncio.gather(
        *(writer.artifacts.put(b, name=f"b{n}", reader="beta") for n, b in enumerate(blobs))
    )
    offsets = [int(a.location.rpartition("@")[2]) for a in artifacts]
    assert len(set(offsets)) == 4
    for blob, artifact in zip(blobs, artifacts, strict=True):
        assert await reader.artifacts.read(artifact) == blob
    empty = await writer.artifacts.put(b"", name="empty", reader="beta")
    assert await reader.artifacts.read(empty) == b""


async def test_a_reference_with_another_digest_is_corrupt(make_bus: BusFactory) -> None:
    """Bytes that do not match the reference's digest are refused, the last chunk held back."""
    writer = await make_bus("alpha-1", artifact_chunk_size=64 * 1024)
    artifact = await writer.artifacts.put(os.urandom(200_000), name="blob", reader="alpha")
    lying = Artifact.model_validate({**artifact.model_dump(), "sha256": "0" * 64})
    handed: list[bytes] = []

    async def take_all() -> None:
        async for chunk in writer.artifacts.open(lying):
            handed.append(chunk)

    with pytest.raises(ArtifactCorrupt):
        await take_all()
    assert sum(map(len, handed)) < artifact.size


async def test_a_missing_or_expired_artifact_is_a_clear_error(make_bus: BusFactory) -> None:
    """No stream, an offset past the end, or past expires_at: each an ArtifactMissing."""
    writer = await make_bus("alpha-1", artifact_read_timeout=1.0)
    artifact = await writer.artifacts.put(b"data", name="blob", reader="alpha")
    stream = artifact.location.rpartition("@")[0]
    nowhere = Artifact.model_validate({**artifact.model_dump(), "location": "no.such.stream@0"})
    with pytest.raises(ArtifactMissing, match="not there"):
        await writer.artifacts.read(nowhere)
    ahead = Artifact.model_validate({**artifact.model_dump(), "location": f"{stream}@99999"})
    with pytest.raises(ArtifactMissing, match="no chunk"):
        await writer.artifacts.read(ahead)
    old = Artifact.model_validate(
        {**artifact.model_dump(), "expires_at": utcnow() - timedelta(seconds=1)}
    )
    with pytest.raises(ArtifactExpired):
        await writer.artifacts.read(old)


async def test_an_artifact_its_stream_no_longer_holds_reads_as_expired(
    make_bus: BusFactory, exchange_name: str, raw_channel: aio_pika.abc.AbstractChannel
) -> None:
    """Retention dropped the object's segment: the reader starts past its offset and says
    it expired, instead of reading another object's bytes."""
    stream = Topology(exchange_name).artifact_stream("alpha", "alpha")
    await raw_channel.declare_queue(
        stream,
        durable=True,
        arguments={
            "x-queue-type": "stream",
            "x-max-length-bytes": 2_000_000,
            "x-stream-max-segment-size-bytes": 500_000,
        },
    )
    writer = await make_bus("alpha-1", artifact_chunk_size=100_000, artifact_read_timeout=2.0)
    first = await writer.artifacts.put(os.urandom(600_000), name="first", reader="alpha")
    for n in range(8):  # past the stream's byte cap: its oldest segments go
        await writer.artifacts.put(os.urandom(600_000), name=f"more{n}", reader="alpha")
    with pytest.raises(ArtifactExpired, match="no longer in its stream"):
        await writer.artifacts.read(first)


async def test_a_reader_whose_connection_is_cut_picks_up_where_it_was(
    make_bus: BusFactory, exchange_name: str
) -> None:
    """The broker closes the reader's connection mid-object: it reconnects and reads on from
    the next offset, and the object comes out whole (its digest checks)."""
    writer = await make_bus("alpha-1", artifact_chunk_size=256 * 1024)
    # An id of this test's own: the cut is by connection name, on a shared broker where
    # another module's agents may be called beta-1 at the same moment.
    reader = await make_bus(f"beta-{exchange_name}")
    data = os.urandom(20 * MB)
    artifact = await writer.artifacts.put(data, name="long.bin", reader="beta")
    taken = bytearray()
    cut = 0
    async for chunk in reader.artifacts.open(artifact):
        taken += chunk
        if not cut and len(taken) >= 2 * MB:
            cut = await force_close(f"agentbus:beta-{exchange_name}")
    assert cut == 1
    assert reader.stats.connections >= 2, "the reader reconnected"
    assert bytes(taken) == data


async def test_a_put_whose_probe_the_broker_refuses_starts_it_again(
    make_bus: BusFactory, exchange_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RabbitMQ 3.10 closes the connection (INTERNAL_ERROR) on a consume of a stream not
    yet registered, as a loaded node can be: nothing is written yet, so the put starts its
    probe again once the connection is back, and the object reads back whole."""
    writer = await make_bus(f"alpha-{exchange_name}", reconnect_interval=0.2)
    reader = await make_bus("beta-1")
    start = _Probe._start
    cut: list[int] = []

    async def cut_first(probe: _Probe, channel: aio_pika.abc.AbstractChannel) -> None:
        if not cut:  # the broker closes the connection as the probe's consume goes out
            cut.append(await force_close(f"agentbus:alpha-{exchange_name}"))
        await start(probe, channel)

    monkeypatch.setattr(_Probe, "_start", cut_first)
    blob = os.urandom(300_000)
    artifact = await writer.artifacts.put(blob, name="b", reader="beta")
    assert cut == [1]
    assert await reader.artifacts.read(artifact) == blob
