"""The demo with no broker: the whole team in this process, on the in-memory bus."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from agentbus._config import Settings
from agentbus._exceptions import AgentBusError
from agentbus._logging import configure_logging
from agentbus.agents import Agent
from agentbus.cli._analysis import analyse, timings
from agentbus.leader import Leader, PlanClient
from agentbus.registry import Registry
from agentbus.testing import MemoryBroker, MemoryBus

__all__ = ["run_memory_demo"]

_HEARTBEAT: Final = 2.0
_READY_TIMEOUT: Final = 30.0


def _team(broker: MemoryBroker, settings: Settings, root: Path, code_instances: int) -> list[Agent]:
    # Here, not at the top: the code agents need radon (the demo extra), the CLI does not.
    from agentbus.agents.builtin import CodeAgent, FilesAgent, ReportAgent, TextAgent

    def bus(agent_id: str) -> MemoryBus:
        return MemoryBus(broker, settings, agent_id=agent_id)

    beat = _HEARTBEAT
    return [
        Registry(bus=bus("demo-registry"), heartbeat_interval=beat),
        Leader(bus=bus("demo-leader"), heartbeat_interval=beat),
        FilesAgent(root=root, bus=bus("demo-files"), heartbeat_interval=beat),
        *(
            CodeAgent(root=root, bus=bus(f"demo-code-{n}"), heartbeat_interval=beat)
            for n in range(1, code_instances + 1)
        ),
        TextAgent(bus=bus("demo-text"), heartbeat_interval=beat),
        ReportAgent(bus=bus("demo-report"), heartbeat_interval=beat),
    ]


async def run_memory_demo(
    settings: Settings, root: Path, *, code_instances: int, say: Callable[[str], None]
) -> int:
    """Run the demo's team and plans in this process; return the exit status."""
    begun = time.monotonic()
    # The agents share this process: their info lines would bury the report.
    configure_logging("warning")
    broker = MemoryBroker()
    team = _team(broker, settings, root, code_instances)
    async with contextlib.AsyncExitStack() as stack:
        for agent in team:
            await stack.enter_async_context(agent)
        client = MemoryBus(broker, settings, agent_id=f"demo-client-{secrets.token_hex(3)}")
        bus = await stack.enter_async_context(client)
        ready = await _wait_ready(bus, {agent.id for agent in team})
        say(f"team of {len(team)} agents ready: " + ", ".join(agent.id for agent in team))
        code, plans = await analyse(PlanClient(bus), root, say)
        for line in timings(plans, ready, time.monotonic() - begun) if plans else []:
            say(line)
    say(f"team stopped ({len(team)} agents, in this process)")
    return code


async def _wait_ready(bus: MemoryBus, expected: set[str]) -> float:
    started = time.monotonic()
    known: set[str] = set()
    async with asyncio.timeout(_READY_TIMEOUT):
        while known != expected:
            with contextlib.suppress(AgentBusError):
                reply = await bus.request("registry", "list_agents", timeout=2)
                known = {agent["agent_id"] for agent in reply.result} & expected
            if known != expected:
                await asyncio.sleep(0.05)
    return time.monotonic() - started
