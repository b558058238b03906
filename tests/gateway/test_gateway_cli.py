"""``agentbus gateway`` and ``run-a2a`` as commands: a process, its options, one-line errors."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx
from a2a_client import data_of, sdk_client, send, user_message
from gateway_agents import Calc
from gateway_team import HEARTBEAT, KEY, Team, free_port

AGENTBUS = str(Path(sys.executable).with_name("agentbus"))


async def run(*args: str) -> tuple[int, str]:
    """Run ``agentbus ARGS``; return its exit status and standard error."""
    process = await asyncio.create_subprocess_exec(
        AGENTBUS, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    _, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, err.decode()


async def test_the_gateway_command_serves_the_bus_agents(team: Team, tmp_path: Path) -> None:
    """``agentbus gateway --keys FILE`` serves calc; SIGTERM stops it cleanly."""
    await team.add(Calc(agent_id="calc-1", settings=team.settings, heartbeat_interval=HEARTBEAT))
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({KEY: "alice"}))
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        AGENTBUS, "--url", team.settings.url, "--exchange", team.settings.exchange,
        "gateway", "--keys", str(keys), "--port", str(port),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        async with asyncio.timeout(20), httpx.AsyncClient() as http:
            while True:
                try:
                    listing = (await http.get(f"{url}/agents")).json()
                except httpx.HTTPError:
                    listing = {"agents": []}
                if any(card["name"] == "calc" for card in listing["agents"]):
                    break
                await asyncio.sleep(0.1)
        async with sdk_client(f"{url}/agents/calc", KEY) as client:
            (response,) = await send(client, user_message({"n": 7}, skill="double"))
        assert data_of(response.task.artifacts[0].parts[0]) == 14
    finally:
        process.terminate()
        status = await process.wait()
    assert status == 0


async def test_the_commands_refuse_bad_setups_in_one_line(tmp_path: Path) -> None:
    """No keys, a malformed keys file, an unreachable A2A agent: a clear error, no traceback."""
    status, err = await run("gateway")
    assert status == 2
    assert "give --keys FILE" in err
    bad = tmp_path / "keys.json"
    bad.write_text(json.dumps({"short": "alice"}))
    status, err = await run("gateway", "--keys", str(bad))
    assert status == 2
    assert "shorter than 16 characters" in err
    status, err = await run("run-a2a", f"http://127.0.0.1:{free_port()}/")
    assert status == 2
    assert "no A2A agent card at" in err
    assert "Traceback" not in err
