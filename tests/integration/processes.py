"""Agents as separate OS processes for the integration tier: start, watch, wait, clean up.

Every process is an ``agentbus run`` / ``agentbus registry`` / ``agentbus leader`` with its
JSON log on standard error captured to a file under the test's ``tmp_path``. The ``procs``
fixture (conftest.py) hands a test a ``Processes`` and stops everything after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sample_agents
from helpers import BusFactory

from agentbus import AgentBusError, Bus
from agentbus.bus import Topology
from support.waiting import wait_until

T = TypeVar("T")

INTERVAL = 1.0  # the heartbeat interval of every process, seconds
MISSED = 3  # missed intervals after which the registry calls an agent offline
SLACK = 1.5  # process wake-ups, sweep scheduling and a round trip on a loaded machine
STARTUP = 30.0  # a bound on a process starting (imports, connecting) on a loaded machine
STARTED = "agent started"  # the log event of an agent (or registry) that serves
AGENTBUS = Path(sys.executable).with_name("agentbus")
HERE = Path(__file__).resolve().parent  # sample_agents.py lives here


async def within(seconds: float, predicate: Callable[[], bool], what: str) -> None:
    """Wait until ``predicate()`` holds; fail the test, saying what, after ``seconds``."""
    try:
        await wait_until(predicate, timeout=max(seconds, 0.05), interval=0.02)
    except TimeoutError:
        pytest.fail(f"waited {seconds:.2f} s for {what}", pytrace=False)


async def poll(probe: Callable[[], Awaitable[T | None]], seconds: float, what: str) -> T:
    """Call ``probe`` until it returns a value (a bus error is a no); fail after ``seconds``."""
    last = "no answer yet"
    try:
        async with asyncio.timeout(max(seconds, 0.1)):
            while True:
                try:
                    value = await probe()
                except AgentBusError as exc:
                    last = f"{type(exc).__name__}: {exc}"
                else:
                    if value is not None:
                        return value
                    last = "answered, condition not met"
                await asyncio.sleep(0.05)
    except TimeoutError:
        pytest.fail(f"waited {seconds:.2f} s for {what}; last: {last}", pytrace=False)


def since(moment: datetime) -> float:
    """Seconds from ``moment`` (a log line's UTC time) to now."""
    return (datetime.now(UTC) - moment).total_seconds()


@dataclass
class AgentProcess:
    """One ``agentbus`` serving process and the files its output goes to."""

    agent_id: str
    popen: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> list[dict[str, Any]]:
        """The JSON log lines written so far (anything else on stderr is skipped)."""
        records = []
        for line in self.stderr.read_text(encoding="utf-8", errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    records.append(record)
        return records

    def logged(self, event: str) -> dict[str, Any] | None:
        return next((record for record in self.log() if record.get("event") == event), None)

    def tail(self, lines: int = 15) -> str:
        text = self.stderr.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    async def started(self) -> datetime:
        """Wait until the process logs "agent started"; return the time it logged it."""
        await within(
            STARTUP,
            lambda: not self.running or self.logged(STARTED) is not None,
            f"{self.agent_id} to log {STARTED!r}",
        )
        record = self.logged(STARTED)
        if record is None:
            pytest.fail(
                f"{self.agent_id} exited with status {self.popen.returncode} before it "
                f"started:\n{self.tail()}",
                pytrace=False,
            )
        return datetime.fromisoformat(record["timestamp"])

    async def exited(self, seconds: float) -> int:
        """Wait until the process has exited; return its status."""
        await within(seconds, lambda: not self.running, f"{self.agent_id} to exit")
        return self.popen.returncode


@dataclass
class Processes:
    """Starts ``agentbus`` processes and bus clients for one test, and cleans up after it."""

    url: str
    exchange: str
    workdir: Path
    make_bus: BusFactory
    processes: list[AgentProcess] = field(default_factory=list)
    clients: list[Bus] = field(default_factory=list)
    services: set[str] = field(default_factory=set)
    extra_env: dict[str, str] = field(default_factory=dict)
    """Set in every process started from now on (after the AGENTBUS_* of the test's own)."""

    def command(self, *args: str) -> list[str]:
        return [
            str(AGENTBUS),
            *("--url", self.url, "--exchange", self.exchange),
            *("--log-format", "json", "--log-level", "info"),
            *args,
        ]

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
        return env | self.extra_env

    def agent(
        self, cls: str, agent_id: str, *options: str, heartbeat: float = INTERVAL
    ) -> AgentProcess:
        """Start ``agentbus run sample_agents:<cls>``."""
        self.services.add(getattr(sample_agents, cls).name)
        target = f"sample_agents:{cls}"
        common = ("--id", agent_id, "--heartbeat", str(heartbeat))
        return self._spawn(agent_id, "run", target, *common, *options)

    def registry(self, agent_id: str) -> AgentProcess:
        """Start ``agentbus registry``."""
        self.services.add("registry")
        options = ("--id", agent_id, "--heartbeat", str(INTERVAL), "--missed", str(MISSED))
        return self._spawn(agent_id, "registry", *options)

    def leader(self, agent_id: str, *options: str) -> AgentProcess:
        """Start ``agentbus leader``."""
        self.services.add("leader")
        common = ("--id", agent_id, "--heartbeat", str(INTERVAL))
        return self._spawn(agent_id, "leader", *common, *options)

    def _spawn(self, agent_id: str, *args: str) -> AgentProcess:
        stem = self.workdir / f"{len(self.processes)}-{agent_id}"
        out, err = Path(f"{stem}.stdout"), Path(f"{stem}.stderr")
        with out.open("wb") as stdout, err.open("wb") as stderr:
            popen = subprocess.Popen(
                self.command(*args),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=self.env,
                cwd=self.workdir,
            )
        process = AgentProcess(agent_id, popen, out, err)
        self.processes.append(process)
        return process

    async def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run a one-shot ``agentbus`` command to its end."""
        return await asyncio.to_thread(
            subprocess.run,
            self.command(*args),
            capture_output=True,
            text=True,
            timeout=60,
            env=self.env,
            cwd=self.workdir,
            check=False,
        )

    async def client(self) -> Bus:
        bus = await self.make_bus()
        self.clients.append(bus)
        return bus

    def stop_all(self) -> None:
        """SIGTERM every process still running; SIGKILL those not gone 10 s later."""
        running = [process.popen for process in self.processes if process.running]
        for popen in running:
            popen.terminate()
        deadline = time.monotonic() + 10
        for popen in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=max(deadline - time.monotonic(), 0.01))
        for popen in running:
            if popen.poll() is None:
                popen.kill()
                popen.wait(timeout=10)

    def report(self) -> None:
        """Print each process's exit status and last log lines (pytest shows it on failure)."""
        for process in self.processes:
            print(f"--- {process.agent_id}: exit {process.popen.returncode}, {process.stderr}")
            print(process.tail())

    def queues(self) -> set[str]:
        """The service queues of what was started and every process's instance queue."""
        topology = Topology(self.exchange)
        names = {topology.service_queue(name) for name in self.services}
        names.update(topology.instance_queue(process.agent_id) for process in self.processes)
        return names
