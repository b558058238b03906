"""A nemesis for the cluster tier: faults drawn from a seeded schedule, each timed until work flows.

Jepsen's shape: a workload writes to a ledger (every request sent and how it ended, every
effect a worker executed), while a nemesis injects one fault at a time, drawn by a seeded
``random.Random`` so that a failing run replays with its seed. Each fault is healed
before the next; for each, the time from its healing until the ledger records a new
effect is "until work flowed again".

The faults (``FAULTS``): kill -9 of a broker node and its restart; a restart of all three
nodes (stopped together, started together); kill -9 of a durable leader and a new one
started; kill -9 of a worker mid-step and a new one started; every connection of a node
force-closed; the client partitioned from the broker (its proxy cuts every link and
refuses new ones) and healed.
"""

from __future__ import annotations

import asyncio
import collections
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import aio_pika

from agentbus.testing.chaos import AgentProcess, ChaosProxy, Ledger, PrivateCluster

FAULTS: Final = (
    "node kill -9 and restart",
    "all three nodes restarted",
    "leader kill -9",
    "worker kill -9 mid-step",
    "connections force-closed",
    "client partitioned",
)
PARTITION: Final = 5.0  # seconds the client stays cut off
NODE_DOWN: Final = 3.0  # seconds a killed node stays down
STARTS: Final = 5  # a replacement is started at most this often before the run fails
STARTING: Final = 120.0  # seconds a replacement may take to serve (a loaded host is slow)


@dataclass
class FaultRow:
    """What one kind of fault did over a run: how often, and how long until work flowed."""

    name: str
    count: int = 0
    flowed_after: list[float] = field(default_factory=list)

    def cells(self) -> str:
        if not self.flowed_after:
            return f"| {self.name} | {self.count} | - | - |"
        median, worst = statistics.median(self.flowed_after), max(self.flowed_after)
        return f"| {self.name} | {self.count} | {median:.1f} s | {worst:.1f} s |"


@dataclass
class Crew:
    """The processes the nemesis may kill, and how to start a replacement."""

    leaders: list[AgentProcess]
    workers: list[AgentProcess]
    start_leader: Callable[[], AgentProcess]
    start_worker: Callable[[], AgentProcess]
    ids: dict[int, str] = field(default_factory=dict)
    """Each process's agent id, by pid."""


class Nemesis:
    """Injects the faults of ``FAULTS`` in a seeded order and times each recovery."""

    def __init__(
        self,
        seed: int,
        cluster: PrivateCluster,
        proxy: ChaosProxy,
        crew: Crew,
        ledger: Ledger,
    ) -> None:
        self.seed = seed
        self.rows = {name: FaultRow(name) for name in FAULTS}
        self.log: list[str] = []
        self.restarts = 0
        """Replacements that exited before they served, and were started again."""
        self.kills: dict[str, float] = {}
        """When each agent the nemesis killed (kill -9) died, by agent id (time.time())."""
        self._rng = random.Random(seed)
        self._cluster = cluster
        self._proxy = proxy
        self._crew = crew
        self._ledger = ledger

    def table(self) -> str:
        head = "| fault | count | until work flowed, median | worst |\n| --- | --- | --- | --- |"
        return "\n".join([head, *(row.cells() for row in self.rows.values())])

    async def run(self, seconds: float, pause: tuple[float, float] = (2.0, 6.0)) -> None:
        """Inject faults for ``seconds``, a random pause between them; every kind at least once."""
        deadline = time.monotonic() + seconds
        pending = list(FAULTS)
        self._rng.shuffle(pending)
        while time.monotonic() < deadline or pending:
            name = pending.pop() if pending else self._rng.choice(FAULTS)
            await self.inject(name)
            await asyncio.sleep(self._rng.uniform(*pause))

    async def inject(self, name: str) -> None:
        """Inject fault ``name``, heal it, and wait until an effect is recorded again."""
        began = time.monotonic()
        await _FAULT_ACTIONS[name](self)
        healed = time.monotonic()
        flowed = await self._work_flows(timeout=120.0)
        row = self.rows[name]
        row.count += 1
        row.flowed_after.append(flowed)
        self.log.append(
            f"{name}: healed after {healed - began:.1f} s, work flowed {flowed:.1f} s later"
        )

    async def _work_flows(self, timeout: float) -> float:
        began, before = time.monotonic(), len(self._ledger.effects())
        while len(self._ledger.effects()) <= before:
            if time.monotonic() - began > timeout:
                raise AssertionError(f"seed {self.seed}: no work for {timeout} s after a fault")
            await asyncio.sleep(0.05)
        return time.monotonic() - began

    async def _node_kill(self) -> None:
        victim = self._rng.randrange(len(self._cluster.nodes))
        await self._cluster.kill(victim)
        await asyncio.sleep(NODE_DOWN)  # the fault's length: the node stays down this long
        await self._cluster.start(victim)
        await self._cluster.ensure_running()

    async def _all_nodes(self) -> None:
        nodes = range(len(self._cluster.nodes))
        await asyncio.gather(*(self._cluster.stop(i) for i in nodes))
        await asyncio.gather(*(self._cluster.start(i) for i in nodes))
        await self._cluster.ensure_running()

    async def _leader_kill(self) -> None:
        crew = self._crew
        victim = crew.leaders.pop(self._rng.randrange(len(crew.leaders)))
        self._kill(victim)
        crew.leaders.append(await self._replacement(crew.start_leader))

    async def _worker_kill(self) -> None:
        crew = self._crew
        victim = crew.workers.pop(self._rng.randrange(len(crew.workers)))
        self._kill(victim)
        crew.workers.append(await self._replacement(crew.start_worker))

    async def _replacement(self, start: Callable[[], AgentProcess]) -> AgentProcess:
        # As a supervisor (Kubernetes) does: a process that exits before it serves (a
        # durable leader whose journal's stream has no leader yet, past its 30 s wait, on
        # a cluster coming back) is started again.
        for _ in range(STARTS):
            process = start()
            try:
                await process.started(timeout=STARTING)
            except RuntimeError:  # it exited first
                self.restarts += 1
                self.log.append(f"a replacement exited before it served: {process.tail()[-300:]}")
                continue
            return process
        raise AssertionError(f"seed {self.seed}: no replacement served after {STARTS} starts")

    def _kill(self, victim: AgentProcess) -> None:
        victim.kill()
        self.kills[self._crew.ids.get(victim.pid, str(victim.pid))] = time.time()

    def unexplained_reruns(self) -> dict[str, list[tuple[str, float, bool]]]:
        """The requests run again after their effect, other than after a kill -9.

        A worker killed after its effect and before the record of its completion leaves
        a running marker that lapses with its lease: a copy then runs again, and
        ``apply_once`` finds the effect done (a replay). That is the one window the bus
        cannot close (docs/reliability.md); every other re-run is a de-duplication fault.
        """
        unexplained = {}
        for message_id, runs in self._ledger.reruns().items():
            (first, applied, _), later = runs[0], runs[1:]
            died = self.kills.get(first)
            if died is None or not all(applied <= died <= at for _, at, _ in later):
                unexplained[message_id] = runs
        return unexplained

    async def _close_connections(self) -> None:
        victim = self._rng.randrange(len(self._cluster.nodes))
        await asyncio.to_thread(self._cluster.nodes[victim].close_connections)

    async def _partition(self) -> None:
        self._proxy.refuse()
        self._proxy.cut()
        await asyncio.sleep(PARTITION)  # the fault's length: the client is cut off this long
        self._proxy.heal()


_FAULT_ACTIONS: Final = dict(
    zip(
        FAULTS,
        (
            Nemesis._node_kill,
            Nemesis._all_nodes,
            Nemesis._leader_kill,
            Nemesis._worker_kill,
            Nemesis._close_connections,
            Nemesis._partition,
        ),
        strict=True,
    )
)


async def dead_letters(url: str, queue: str) -> collections.Counter[tuple[str, str]]:
    """Drain the dead-letter ``queue``: how many left each queue, for each reason (x-death)."""
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        try:
            source = await channel.declare_queue(queue, passive=True)
        except aio_pika.exceptions.ChannelNotFoundEntity:
            return counts
        while (message := await source.get(no_ack=True, fail=False)) is not None:
            deaths: Any = message.headers.get("x-death") or [{}]
            first = deaths[0] if isinstance(deaths, list) and deaths else {}
            counts[(str(first.get("queue", "?")), str(first.get("reason", "?")))] += 1
    return counts
