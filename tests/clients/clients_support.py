"""The foreign clients as the tests run them: where they are, how to start them, their output.

``scripts/ensure-foreign-clients`` installs them (the test command calls it). Without one, a
test skips, or fails under CI (``CI`` / ``AGENTBUS_REQUIRE_BROKER`` set).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from processes import INTERVAL, SLACK, AgentProcess, Processes, poll

from support.required import missing

ROOT = Path(__file__).resolve().parents[2]
NODE_CLIENT = ROOT / "examples" / "clients" / "node" / "client.mjs"
GO_CLIENT = ROOT / ".cache" / "clients" / "agentbus-go-client"
ASYNCAPI_CHECK = ROOT / "tests" / "clients" / "asyncapi" / "check.mjs"
ENSURE = "./scripts/ensure-foreign-clients installs it"
REGISTRY = "registry-1"
LEADER = "leader-1"
WORKER = "worker-1"


def node() -> str:
    """The ``node`` binary; skip or fail without it."""
    found = shutil.which("node")
    if found is None:
        missing(f"node is not installed; {ENSURE}")
    return found


def node_package(script: Path, package: str) -> list[str]:
    """``node <script>``, once ``package`` is installed next to it; skip or fail without it."""
    command = [node(), str(script)]
    if not (script.parent / "node_modules" / package / "package.json").is_file():
        missing(f"{package} is not installed in {script.parent.relative_to(ROOT)}; {ENSURE}")
    return command


def client_command(kind: str) -> list[str]:
    """The command line of the ``node`` or ``go`` client."""
    if kind == "node":
        return node_package(NODE_CLIENT, "amqplib")
    if not os.access(GO_CLIENT, os.X_OK):
        missing(f"the Go client is not built at {GO_CLIENT.relative_to(ROOT)}; {ENSURE}")
    return [str(GO_CLIENT)]


@dataclass
class Finished:
    """A client run to its end: exit status, the envelopes it printed, its notes."""

    status: int
    envelopes: list[dict[str, Any]]
    notes: str
    seconds: float


@dataclass
class ForeignClient:
    """One of the foreign clients, pointed at a broker and an exchange."""

    kind: str
    url: str
    exchange: str

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
        return {**env, "AGENTBUS_URL": self.url, "AGENTBUS_EXCHANGE": self.exchange}

    async def start(self, *args: str) -> asyncio.subprocess.Process:
        """Start the client with ``args``; its output is piped."""
        return await asyncio.create_subprocess_exec(
            *client_command(self.kind), *args,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env,
        )  # fmt: skip

    async def run(self, *args: str, stdin: bytes = b"", timeout: float = 60) -> Finished:
        """Run the client with ``args`` to its end."""
        started = time.monotonic()
        process = await self.start(*args)
        try:
            out, err = await asyncio.wait_for(process.communicate(stdin), timeout)
        except TimeoutError:
            process.kill()
            await process.wait()
            pytest.fail(f"{self.kind} client {' '.join(args)} ran over {timeout} s", pytrace=False)
        assert process.returncode is not None
        return finished(process.returncode, out, err, time.monotonic() - started)


def finished(status: int, out: bytes, err: bytes, seconds: float) -> Finished:
    """The output of a client: one JSON envelope per stdout line."""
    envelopes = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
    return Finished(status, envelopes, err.decode(errors="replace"), seconds)


async def started(procs: Processes, *processes: AgentProcess) -> None:
    """Wait until every process serves and the registry (if one runs) lists them all."""
    for process in processes:
        await process.started()
    if not any(process.agent_id == REGISTRY for process in processes):
        return
    bus = await procs.client()
    wanted = {process.agent_id for process in processes}

    async def all_listed() -> bool | None:
        reply = await bus.request(REGISTRY, "list_agents", timeout=2)
        return True if {row["agent_id"] for row in reply.result} >= wanted else None

    await poll(all_listed, INTERVAL + SLACK + 5, "the registry to list every process")
