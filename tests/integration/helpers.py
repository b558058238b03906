"""Helpers for integration tests: bus factories, forcing disconnects."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from typing import Any, Protocol

import pytest

from agentbus import Bus


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
