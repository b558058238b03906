"""An artifact through a kill -9 of a cluster node: it resumes, or fails clearly, never corrupt.

On the tier's 3-node private cluster (every bus given all three nodes), 30 MB are stored
for a reader; the node the reader is connected to is killed (-9) while it reads, then the
node the writer is connected to while it writes another 30 MB (each 10 MB in). Each end
either goes on (on another node: offsets are exact, so the reader picks up where it was)
and the bytes check against their digest, or raises an agentbus error that says what
happened.
Figures are printed: ``pytest -rP``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
from chaos_support import BusOpener

from agentbus import AgentBusError, Artifact
from agentbus.testing.chaos import PrivateCluster

pytestmark = pytest.mark.cluster

MB = 1000 * 1000
SIZE = 30 * MB  # each way; the kill comes 10 MB in
FAST: dict[str, Any] = {"reconnect_interval": 0.5, "heartbeat": 2}


async def _read(bus: Any, artifact: Artifact, kill: Any) -> tuple[str, bytes]:
    """Read ``artifact``, calling ``kill`` once 10 MB are in; say how it ended."""
    digest, taken, killed = hashlib.sha256(), bytearray(), False
    try:
        async for chunk in bus.artifacts.open(artifact):
            taken += chunk
            digest.update(chunk)
            if not killed and len(taken) >= 10 * MB:
                killed = True
                await kill()
    except AgentBusError as exc:
        return f"error {type(exc).__name__}: {exc}", bytes(taken)
    return "whole", bytes(taken)


async def test_a_node_killed_under_a_reader_and_a_writer(
    private_cluster: PrivateCluster, open_bus: BusOpener
) -> None:
    """Kill -9 the reader's node mid-read, then the writer's mid-write: whole and checked,
    or a clear error; never bytes that are not the object's."""
    url = private_cluster.url
    writer = await open_bus(url, "alpha-1", **FAST)
    reader = await open_bus(url, "beta-1", **FAST)
    data = os.urandom(SIZE)
    artifact = await writer.artifacts.put(data, name="big.bin", reader="beta")

    async def kill_reader_node() -> None:
        node = await private_cluster.node_of_connection("agentbus:beta-1")
        assert node is not None
        await private_cluster.kill(node)

    outcome, taken = await _read(reader, artifact, kill_reader_node)
    print(f"\n[cluster: artifact read through a kill -9] {outcome}; {len(taken)} bytes")
    if outcome == "whole":
        assert taken == data
    else:
        assert data.startswith(taken), "the bytes handed over are the object's"
    await private_cluster.ensure_running()

    async def kill_writer_node() -> None:
        node = await private_cluster.node_of_connection("agentbus:alpha-1")
        assert node is not None
        await private_cluster.kill(node)

    async def source() -> AsyncIterator[bytes]:
        for n in range(SIZE // MB):
            if n == 10:  # 10 MB are in: the writer's node goes
                await kill_writer_node()
            yield os.urandom(MB)

    writing = writer.artifacts.put(source(), name="second", reader="beta")
    try:
        second = await writing
    except AgentBusError as exc:
        print(f"[cluster: artifact write through a kill -9] error {type(exc).__name__}: {exc}")
    else:
        check = await open_bus(url, "alpha-2", **FAST)
        assert hashlib.sha256(await check.artifacts.read(second)).hexdigest() == second.sha256
        print("[cluster: artifact write through a kill -9] whole")
