"""The private cluster itself: formed, a node killed and started again, a broker fact pinned.

Figures are printed: ``pytest -rP``.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import aio_pika
import aiormq.exceptions
import pytest

from agentbus.testing.chaos import PrivateCluster

pytestmark = pytest.mark.cluster

BOUND = 60.0  # a hang guard for a node's start and rejoin


async def _running_all(cluster: PrivateCluster, seconds: float) -> list[str]:
    everyone = sorted(node.node for node in cluster.nodes)
    deadline = time.monotonic() + seconds
    while (running := await cluster.running_nodes()) != everyone:
        if time.monotonic() > deadline:
            pytest.fail(f"running {running}, not {everyone}, after {seconds} s", pytrace=False)
        await asyncio.sleep(0.2)
    return running


async def test_the_cluster_runs_every_node_on_ports_of_its_own(
    private_cluster: PrivateCluster,
) -> None:
    """Three nodes in one cluster, each on its own port; ``url`` names them all."""
    running = await private_cluster.running_nodes()
    ports = [node.port for node in private_cluster.nodes]

    print(f"\n[cluster kit] formed in {private_cluster.formed_seconds:.2f} s: {running}")
    assert len(running) == 3
    assert len(set(ports)) == 3
    assert not {5672, 25672, 4369} & {*ports, private_cluster.epmd_port}
    assert private_cluster.url == ";".join(private_cluster.urls)
    assert [private_cluster.index_of(url) for url in private_cluster.urls] == [0, 1, 2]


async def test_a_killed_node_starts_again_and_rejoins(private_cluster: PrivateCluster) -> None:
    """kill -9 of a node drops it from the running nodes; started again, it is back in."""
    victim = private_cluster.nodes[2]
    await private_cluster.kill(2)
    assert victim.node not in await private_cluster.running_nodes()

    began = time.monotonic()
    await private_cluster.start(2)
    await _running_all(private_cluster, BOUND)
    rejoined = time.monotonic() - began

    print(f"\n[cluster kit] killed node started and rejoined in {rejoined:.2f} s")


async def test_a_quorum_queue_leader_and_a_connection_node_are_found(
    private_cluster: PrivateCluster,
) -> None:
    """The leader of a quorum queue is the declaring client's node; its connection is found."""
    queue, name = f"kit-{uuid.uuid4().hex[:8]}", f"kit-{uuid.uuid4().hex[:8]}"
    connection = await aio_pika.connect(
        private_cluster.urls[1], client_properties={"connection_name": name}
    )
    async with connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(
            queue, durable=True, arguments={"x-queue-type": "quorum"}
        )
        assert await private_cluster.queue_leader(queue) == 1
        assert await private_cluster.node_of_connection(name) == 1
        await declared.delete(if_unused=False, if_empty=False)
    assert await private_cluster.node_of_connection("no such connection") is None


async def test_a_channel_publishing_during_a_quorum_election_stays_nacked(
    private_cluster: PrivateCluster,
) -> None:
    """RabbitMQ 3.10, measured: a channel that publishes to a quorum queue while its leader
    is being elected is nacked from then on; a fresh channel is acked.

    The bus must therefore not keep publishing on a channel that got a nack. If the first
    publish comes after the election (a race), only the fresh-channel half is checked.
    """
    queue = f"kit-{uuid.uuid4().hex[:8]}"
    leader_conn = await aio_pika.connect(private_cluster.urls[0])
    async with leader_conn:
        channel = await leader_conn.channel()
        await channel.declare_queue(queue, durable=True, arguments={"x-queue-type": "quorum"})
    survivor = private_cluster.urls[1]
    connection = await aio_pika.connect(survivor)
    async with connection:
        early = await connection.channel(publisher_confirms=True)
        await private_cluster.kill(0)
        outcomes = [await _publish(early, queue)]
        began = time.monotonic()
        while time.monotonic() - began < 3:  # well past the election (under 0.5 s here)
            outcomes.append(await _publish(early, queue))
            await asyncio.sleep(0.2)
        fresh = await connection.channel(publisher_confirms=True)
        fresh_outcome = await _publish(fresh, queue)
        cleanup = await connection.channel()
        await cleanup.queue_delete(queue)

    print(f"\n[cluster kit] early channel: {outcomes}; fresh channel: {fresh_outcome}")
    assert fresh_outcome == "ack"
    if outcomes[0] == "nack":
        assert set(outcomes) == {"nack"}, "the nacked channel recovered: the fact changed"


async def _publish(channel: aio_pika.abc.AbstractChannel, queue: str) -> str:
    try:
        await channel.default_exchange.publish(
            aio_pika.Message(b"x", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key=queue,
            timeout=5,
        )
    except aiormq.exceptions.DeliveryError:
        return "nack"
    return "ack"
