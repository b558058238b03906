"""``agentbus mcp --transport http --workers 2``: two processes behind one address.

Calls on connections of their own reach both processes (each calls the bus as alice from
a bus of its own: two senders), in both protocol eras: the 2026-07-28 one exchange per
call, the earlier one without sessions (stateless); SIGTERM stops both.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

from mcp_agents import Scribe
from mcp_team import ERAS, KEY, Team
from test_mcp_http import client, listening

from support.ports import free_port

DEADLINE = 30.0


async def test_two_workers_on_one_address_answer_both_eras(team: Team, tmp_path: Path) -> None:
    scribe = await team.add(
        Scribe(agent_id="scribe-1", settings=team.settings, heartbeat_interval=1.0)
    )
    assert isinstance(scribe, Scribe)
    await team.registered("scribe")
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({KEY: "alice"}))
    port = free_port()
    command = ["mcp", "--transport", "http", "--port", str(port), "--keys", str(keys)]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentbus", *command, "--workers", "2", env=team.env()
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        await listening(port)

        async def call(era: str, n: int) -> None:
            async with client(url, KEY, era) as session:
                result = await session.call_tool("scribe__echo", {"text": f"{era} {n}"})
            assert result.structured_content == {"result": f"{era} {n}"}, result

        async def both_reached(era: str) -> None:
            before, n = len(scribe.senders), 0
            while len(set(scribe.senders[before:])) < 2:
                await asyncio.gather(*(call(era, n + k) for k in range(8)))
                n += 8

        for era in ERAS:
            await asyncio.wait_for(both_reached(era), DEADLINE)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 20) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert all(sender.startswith("alice-") for sender in scribe.senders)
