"""Helpers for integration tests: bus factories, forcing disconnects, broker cleanup."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
from collections.abc import Iterable
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import aio_pika
import pytest

from agentbus import Bus
from agentbus.bus import Topology


class BusFactory(Protocol):
    async def __call__(self, agent_id: str | None = None, **settings: Any) -> Bus: ...


def _rabbitmqctl(*args: str) -> str:
    exe = shutil.which("rabbitmqctl")
    if exe is None:
        pytest.fail("rabbitmqctl is needed to force-close connections", pytrace=False)
    done = subprocess.run(
        [exe, "-q", *args], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


def close_connections(name_prefix: str) -> int:
    """Force-close, on the broker, every connection whose client name starts with the prefix.

    The same fault as ``rabbitmqctl close_all_connections``, limited to this test's
    connections so that nothing else on a shared broker is disturbed.
    """
    out = _rabbitmqctl("list_connections", "--no-table-headers", "pid", "client_properties")
    closed = 0
    for line in out.splitlines():
        pid, _, properties = line.partition("\t")
        if f'{{"connection_name","{name_prefix}' in properties:
            _rabbitmqctl("close_connection", pid, "agentbus test: forced close")
            closed += 1
    return closed


async def force_close(name_prefix: str) -> int:
    """Async wrapper of ``close_connections``."""
    return await asyncio.to_thread(close_connections, name_prefix)


async def delete_topology(url: str, exchange: str, queues: Iterable[str] = ()) -> None:
    """Delete ``queues``, the dead-letter queue and the exchanges of ``exchange``, if there,
    and its streams: the plans' journal, the audit trail, each named service queue's
    conversations, and every other queue or stream named ``<exchange>.*`` (rabbitmqctl)."""
    topology = Topology(exchange)
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
    services = [q for q in queues if q.startswith(topology.service_queue(""))]
    conversations = {f"{queue}.conversations" for queue in services}
    return {topology.journal_queue("plans"), topology.audit_stream, *conversations}


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
