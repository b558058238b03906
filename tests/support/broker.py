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

from agentbus._topology import SCHEDULES_LEASE
from agentbus.bus import Topology, Transport
from agentbus.envelopes import ErrorEnvelope, RequestEnvelope, ResponseEnvelope, decode, encode

# The exchanges whose tests ended, by broker URL: what ``sweep`` looks for at the session's end.
_ENDED: dict[str, set[str]] = {}


async def delete_topology(url: str, exchange: str, queues: Iterable[str] = ()) -> None:
    """Delete ``queues``, the dead-letter queue and the exchanges of ``exchange``, if there,
    and its streams: the journals, the schedules' lease, the audit trail and each named
    service queue's conversations. Every other queue or stream named ``<exchange>.*`` (a
    one-shot CLI client's queue, an artifact stream) goes at the session's end (``sweep``):
    one ``rabbitmqctl`` listing for the session, not one per test."""
    topology = Topology(exchange)
    queues = set(queues)
    _ENDED.setdefault(url, set()).add(exchange)
    names = {topology.dead_letter_queue, *queues, *streams_of(topology, queues)}
    await _delete(url, names, (topology.exchange, topology.dead_letter_exchange))


async def _delete(url: str, queues: Iterable[str], exchanges: Iterable[str] = ()) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        for name in sorted(queues):
            channel = await connection.channel()
            with contextlib.suppress(Exception):
                await channel.queue_delete(name)
        for name in exchanges:
            channel = await connection.channel()
            with contextlib.suppress(Exception):
                await channel.exchange_delete(name)


def sweep() -> None:
    """Delete what the session's ended tests left named ``<exchange>.*`` (``delete_topology``)."""
    while _ENDED:
        url, exchanges = _ENDED.popitem()
        prefixes = tuple(f"{exchange}." for exchange in exchanges)
        left = [name for name in queues_with_prefix(url, "") if name.startswith(prefixes)]
        if left:
            with contextlib.suppress(Exception):  # a private node may be gone by now
                asyncio.run(asyncio.wait_for(_delete(url, left), 60))


def streams_of(topology: Topology, queues: Iterable[str]) -> set[str]:
    """The streams a team on ``topology`` may have declared: the journals of plans and
    schedules, the schedules' lease, the audit trail, and the conversations of each service
    queue among ``queues``."""
    prefix = topology.service_queue("")
    services = [queue.removeprefix(prefix) for queue in queues if queue.startswith(prefix)]
    conversations = {topology.conversations(service) for service in services}
    journals = {topology.journal_queue("plans"), topology.journal_queue("schedules")}
    lease = topology.lease_queue(SCHEDULES_LEASE)
    return {*journals, lease, topology.audit_stream, *conversations}


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
