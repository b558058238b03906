"""Leader-side memory of a plan, for suite.py's fan-out: tracemalloc over Plan + PlanRunner.

Runs in-process on the in-memory bus: a registry and W ``Echo`` workers on a
``MemoryBroker``, and a ``PlanRunner`` with a progress sink that publishes as the
``Leader`` agent's does. Every bus has de-duplication off, so workers keep no replies and
what grows with the plan is the leader's: the plan model, the runner's outcomes and
results, its progress queue and tasks, and the aggregate.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
import tracemalloc
from typing import Any

from _bench_agents import Echo
from agentbus import Agent, Settings
from agentbus.envelopes import BROADCAST
from agentbus.leader import (
    PLAN_PROGRESS,
    NoCapableAgent,
    Plan,
    PlanRunner,
    PlanStatus,
    Progress,
    ProgressReport,
    SkillDirectory,
)
from agentbus.registry import Registry
from agentbus.testing import MemoryBroker, MemoryBus

MEMORY_NOTE = (
    "memory: tracemalloc peak of Plan.model_validate + PlanRunner.run with the leader's "
    "progress events, on the in-memory bus, workers' de-duplication off"
)


def plan_document(n: int, max_parallel: int) -> dict[str, Any]:
    """N independent ``echo`` subtasks and a ``total`` fan-in over all their results."""
    ids = [f"t{i}" for i in range(n)]
    subtasks: list[dict[str, Any]] = [
        {"id": subtask, "skill": "echo", "parameters": {"n": i}} for i, subtask in enumerate(ids)
    ]
    subtasks.append({"id": "sum", "skill": "total", "depends_on": ids, "inputs": {"values": ids}})
    return {"description": f"bench: {n} echoes and their sum", "max_parallel": max_parallel,
            "subtasks": subtasks}  # fmt: skip


async def memory_case(n: int, workers: int, concurrency: int, max_parallel: int) -> dict[str, Any]:
    broker = MemoryBroker()
    settings = Settings(dedup_size=0, shutdown_grace=1.0)
    agents: list[Agent] = []
    for agent_id, cls in [("registry-1", Registry), *((f"echo-{k}", Echo) for k in range(workers))]:
        bus = await MemoryBus(broker, settings, agent_id=agent_id).open()
        agent = cls(agent_id=agent_id, bus=bus, settings=settings, concurrency=concurrency)
        await agent.start()
        agents.append(agent)
    bus = await MemoryBus(broker, settings, agent_id="leader-1").open()
    directory = SkillDirectory(bus)
    found = 0
    while found < workers:
        with contextlib.suppress(NoCapableAgent):
            found = len(await directory.capable("echo", fresh=True))
        await asyncio.sleep(0.01)

    async def progress(batch: list[Progress]) -> None:  # what Leader._sink_for publishes
        backlog[0] = max(backlog[0], len(batch))
        last = batch[-1]
        report = ProgressReport(
            plan_id=last.plan_id, done=last.done, total=last.total, transitions=batch
        )
        data = report.model_dump(mode="json", exclude_none=True)
        for receiver in ("submitter", BROADCAST):
            await bus.emit(PLAN_PROGRESS, data, receiver=receiver, persistent=False,
                           mandatory=False)  # fmt: skip

    backlog = [0]
    document = plan_document(n, max_parallel)
    gc.collect()
    tracemalloc.start()
    try:
        start = time.perf_counter()
        plan = Plan.model_validate(document)
        validated = time.perf_counter()
        plan_bytes = tracemalloc.get_traced_memory()[0]
        runner = PlanRunner(bus, plan, directory=directory, progress=progress)
        aggregate = await runner.run()
        ran = time.perf_counter()
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    if aggregate.status is not PlanStatus.COMPLETED:
        raise RuntimeError(f"memory run: {aggregate.status} {aggregate.error}")
    if aggregate.subtasks[-1].result != n * (n - 1) // 2:
        raise RuntimeError("memory run: wrong sum")
    del runner, aggregate, plan
    for agent in reversed(agents):
        await agent.stop()
        await agent.bus.aclose()
    await bus.aclose()
    return {
        "subtasks": n,
        "peak_bytes": peak,
        "peak_per_subtask": peak / n,
        "plan_bytes": plan_bytes,
        "plan_per_subtask": plan_bytes / n,
        "retained_bytes": retained,
        "progress_backlog_max": backlog[0],
        "validate_s": validated - start,
        "run_s": ran - validated,
    }
