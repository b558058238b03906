"""run-a2a when the A2A server dies mid-plan and comes back: the plan retries, as it says.

(Without retries the subtask fails at once with ``agent_unavailable``: test_run_a2a.py.)
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from gateway_team import HEARTBEAT, Team

from agentbus import AgentBusError
from agentbus.gateway import RemoteA2AAgent
from agentbus.leader import Leader, PlanClient
from support.ports import free_port
from support.waiting import wait_until

SERVER = Path(__file__).with_name("remote_a2a_server.py")


async def serving(port: int) -> asyncio.subprocess.Process:
    """Start the Wordsmith A2A server as a process of its own on ``port``."""
    return await asyncio.create_subprocess_exec(sys.executable, str(SERVER), str(port))


async def card_served(url: str, **options: Any) -> RemoteA2AAgent:
    """Poll ``url`` until its card is served; return an agent for it (not started)."""
    async with asyncio.timeout(20):
        while True:
            try:
                return await RemoteA2AAgent.from_url(url, **options)
            except AgentBusError:
                await asyncio.sleep(0.1)


async def test_a_subtask_on_a_restarted_a2a_server_is_retried_and_succeeds(team: Team) -> None:
    """The server is killed while it holds the subtask, then started again on the same port."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    servers = [await serving(port)]
    try:
        agent = await card_served(
            url, agent_id="words-1", settings=team.settings, heartbeat_interval=HEARTBEAT
        )
        await team.add(agent)
        await team.add(
            Leader(agent_id="leader-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
        )
        plan = {
            "deadline": 60,
            "subtasks": [
                {
                    "id": "long",
                    "skill": "wait",
                    "parameters": {"seconds": 1},
                    "retries": 8,
                    "timeout": 20,
                }
            ],
        }
        running = asyncio.create_task(PlanClient(team.client).run(plan, timeout=60))
        await wait_until(lambda: agent.in_flight == 1, 15)
        servers[0].kill()
        await servers[0].wait()
        servers.append(await serving(port))
        aggregate = await running
    finally:
        for server in servers:
            if server.returncode is None:
                server.kill()
                await server.wait()
    assert aggregate.status.value == "completed"
    (outcome,) = aggregate.subtasks
    assert outcome.result == "waited"
    assert outcome.attempts >= 2  # the first attempt died with the server
