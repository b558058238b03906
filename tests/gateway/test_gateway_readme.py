"""The gateway block of docs/a2a.md, run as written: shell lines from a fresh directory.

Lines ending in ``&`` start processes, ``kill`` SIGTERMs them (each must exit 0), and every
other line must exit 0, tried again for a while as a user would while the team starts. The
block's port 8080 is replaced by a free one; the exchange is this test's own.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
import uuid
from pathlib import Path

from readme_shell import readme_commands, until_ok

from agentbus.bus import Topology
from support.broker import delete_topology
from support.ports import free_port

MARK = "<!-- tested-by: tests/gateway/test_gateway_readme.py -->"


async def test_the_readme_gateway_block_runs_as_written(broker_url: str, tmp_path: Path) -> None:
    """Keys, a registry, the text agent and a gateway; its card, then a SendMessage by curl."""
    port = free_port()
    exchange = f"test-gw-readme-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "AGENTBUS_URL": broker_url,
        "AGENTBUS_EXCHANGE": exchange,
        "AGENTBUS_LOG_LEVEL": "warning",
        "AGENTBUS_INSTANCE_QUEUE_EXPIRES": "5",  # the processes' own queues go soon after them
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    background: list[asyncio.subprocess.Process] = []
    outputs: list[str] = []
    try:
        for line in [c.replace("8080", str(port)) for c in readme_commands(MARK)]:
            words = shlex.split(line, comments=True)
            if not words:
                continue
            if words[0] == "kill":
                for process in background:
                    process.send_signal(signal.SIGTERM)
                async with asyncio.timeout(20):
                    codes = [await process.wait() for process in background]
                assert codes == [0] * len(background)
            elif words[-1] == "&":
                started = await asyncio.create_subprocess_exec(*words[:-1], cwd=tmp_path, env=env)
                background.append(started)
            else:
                outputs.append((await until_ok(line, tmp_path, env)).stdout)
    finally:
        for process in background:
            if process.returncode is None:
                process.kill()
                await process.wait()
        topology = Topology(exchange)
        queues = {topology.service_queue(s) for s in ("registry", "text")}
        await delete_topology(broker_url, exchange, queues)
    card = json.loads(outputs[1])
    assert card["name"] == "text"
    assert {skill["id"] for skill in card["skills"]} >= {"stats", "summarize"}
    task = json.loads(outputs[2])["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"][0]["data"]["sentences"] == 2
