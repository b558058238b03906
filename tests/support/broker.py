"""The real broker as tests use it: raw publishing and replies, finding and deleting queues."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urlsplit

import aio_pika

from agentbus.bus import Topology, Transport
from agentbus.envelopes import ErrorEnvelope, RequestEnvelope, ResponseEnvelope, decode, encode


async def delete_topology(url: str, exchange: str, queues: Iterable[str] = ()) -> None:
    """Delete ``queues``, the dead-letter queue and the exchanges of ``exchange``, if there,
    and its streams: the plans' journal, the audit trail, each named service queue's
    conversations, and every other queue or stream named ``<exchange>.*`` (rabbitmqctl)."""
    topology = Topology(exchange)
    queues = set(queues)
    names = {topology.dead_letter_queue, *queues, *streams_of(topology, queues)}
    names |= set(await asyncio.to_thread(queues_with_prefix, url, f"{exchange}."))
    connection = await aio_pika.connect(url)
    async with connection:
        for name in sorted(names):
            channel = await connection.channel()
            with contextlib.suppress(Exception):
                await channel.queue_delete(name)
        for name in (topology.exchange, topology.dead_letter_exchange):
            channel = await connection.channel()
            with contextlib.suppress(Exception):
                await channel.exchange_delete(name)


def streams_of(topology: Topology, queues: Iterable[str]) -> set[str]:
    """The streams a team on ``topology`` may have declared: the plans' journal, the audit
    trail, and the conversations of each service queue among ``queues``."""
    prefix = topology.service_queue("")
    services = [queue.removeprefix(prefix) for queue in queues if queue.startswith(prefix)]
    conversations = {topology.conversations(service) for service in services}
    return {topology.journal_queue("plans"), topology.audit_stream, *conversations}


def queues_of(exchange: str, buses: Iterable[Transport]) -> set[str]:
    """The queues ``buses`` declared on ``exchange``: each one's instance and service queue."""
    topology = Topology(exchange)
    queues: set[str] = set()
    for bus in buses:
        queues.add(topology.instance_queue(bus.agent_id))
        if bus.service is not None:
            queues.add(topology.service_queue(bus.service))
    return queues


def queues_with_prefix(url: str, prefix: str) -> list[str]:
    """The broker's queues whose name starts with ``prefix``, via rabbitmqctl; [] without it.

    Finds what a test cannot name itself, such as the instance queue of a one-shot CLI
    client (``client-<random>``). Best effort: such queues also expire by themselves.
    """
    exe = shutil.which("rabbitmqctl")
    if exe is None:
        return []
    vhost = unquote(urlsplit(url).path[1:]) or "/"
    try:
        done = subprocess.run(
            [exe, "-q", "list_queues", "-p", vhost, "--no-table-headers", "name"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [name for name in done.stdout.split() if name.startswith(prefix)]


async def publish_raw(
    channel: aio_pika.abc.AbstractChannel,
    exchange: str,
    envelope: RequestEnvelope | ResponseEnvelope,
    key: str,
    **properties: Any,
) -> None:
    """Publish ``envelope`` as a foreign client would, to ``exchange`` ("": the default one)."""
    target = (
        channel.default_exchange
        if exchange == ""
        else await channel.get_exchange(exchange, ensure=False)
    )
    message = aio_pika.Message(encode(envelope), message_id=envelope.message_id, **properties)
    await target.publish(message, key)


async def next_reply(
    queue: aio_pika.abc.AbstractQueue, timeout: float
) -> ErrorEnvelope | ResponseEnvelope:
    """Take the next reply off ``queue`` (acked); fail if none comes within ``timeout``."""
    async with queue.iterator(timeout=timeout) as messages:
        async for message in messages:
            await message.ack()
            reply = decode(message.body)
            assert isinstance(reply, ErrorEnvelope | ResponseEnvelope)
            return reply
    raise AssertionError("no reply")
