"""What the deploy tier shares: where the tools are, podman's settings, a timing record."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final, TypeVar

import aio_pika
import pytest

from agentbus.bus import Topology

T = TypeVar("T")
ROOT: Final = Path(__file__).resolve().parents[2]
DEPLOY: Final = ROOT / "deploy"
VENV_BIN: Final = Path(sys.executable).parent
FIGURES: dict[str, str] = {}  # what the tier measured, printed in the terminal summary

# Podman on this kind of host: runc (crun fails on its cgroups), ulimits at or below the
# host's (open files 20000, processes 32768), no systemd.
CONTAINERS_CONF: Final = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


def required() -> bool:
    """Tell whether a missing tool fails the tier (CI) instead of skipping it."""
    flag = os.environ.get("AGENTBUS_REQUIRE_BROKER") or os.environ.get("CI")
    return flag not in (None, "", "0", "false")


def missing(message: str) -> None:
    """Skip the test for want of a tool, or fail it under CI."""
    if required():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def tool(name: str) -> str:
    """The path of ``name``: the venv's, else on PATH (with sbin); else skip or fail."""
    venv = VENV_BIN / name
    if os.access(venv, os.X_OK):
        return str(venv)
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin"
    found = shutil.which(name, path=path)
    if found is None:
        missing(f"{name} is not installed; ./scripts/ensure-deploy-tools installs it")
    assert found is not None
    return found


def run(
    command: Sequence[str], *, timeout: float = 120, env: dict[str, str] | None = None,
    cwd: Path = ROOT, check: bool = True,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run ``command``; with ``check``, fail the test with its output when it fails."""
    done = subprocess.run(
        list(command), capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
        check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if check and done.returncode != 0:
        pytest.fail(
            f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}",
            pytrace=False,
        )
    return done


@contextmanager
def timed(what: str) -> Iterator[None]:
    """Record how long the block took under ``what`` (shown after the run)."""
    began = time.monotonic()
    try:
        yield
    finally:
        FIGURES[what] = f"{time.monotonic() - began:.1f} s"


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


async def delete_topology(url: str, exchange: str, queues: Iterable[str] = ()) -> None:
    """Delete ``queues``, the dead-letter queue and the exchanges of ``exchange``, if there."""
    topology = Topology(exchange)
    connection = await aio_pika.connect(url)
    async with connection:
        for name in sorted({topology.dead_letter_queue, *queues}):
            channel = await connection.channel()
            with contextlib.suppress(Exception):
                await channel.queue_delete(name)
        for name in (topology.exchange, topology.dead_letter_exchange):
            channel = await connection.channel()
            with contextlib.suppress(Exception):
                await channel.exchange_delete(name)
