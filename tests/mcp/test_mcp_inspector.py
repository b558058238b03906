"""The MCP Inspector's command-line mode lists and calls the team's tools, over stdio and HTTP.

The Inspector (npm, ``scripts/ensure-mcp-tools``) is another SDK (TypeScript) and another
client: it starts ``agentbus mcp`` itself over stdio, or reaches it over Streamable HTTP
with a bearer key, and checks the tools' schemas for portability (``--strict``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from mcp_agents import Scribe
from mcp_team import HEARTBEAT, KEY, Team
from mcp_tools import inspect

from support.waiting import wait_until

SERVER = [sys.executable, "-m", "agentbus", "--log-level", "warning", "mcp"]


def server_env(team: Team) -> list[str]:
    """The Inspector's ``-e`` options: the team's bus for the server it starts (and the
    source tree, when the tests run from one)."""
    names = ["AGENTBUS_URL", "AGENTBUS_EXCHANGE", "AGENTBUS_MCP_REFRESH_INTERVAL", "PYTHONPATH"]
    env = team.env()
    return [option for name in names if name in env for option in ("-e", f"{name}={env[name]}")]


def own_catalog(tmp_path: Path) -> dict[str, str]:
    """The Inspector's environment, its catalog file in the test's folder (not ~)."""
    return {**os.environ, "MCP_CATALOG_PATH": str(tmp_path / "catalog.json")}


async def test_the_inspector_lists_and_calls_the_team_over_stdio(
    team: Team, tmp_path: Path
) -> None:
    """tools/list (no portability error under --strict), and a call: each starts a server."""
    await team.add(
        Scribe(agent_id="scribe-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    )
    await team.registered("scribe")
    start = [*server_env(team), "--", *SERVER]
    env = own_catalog(tmp_path)
    listed, stats = await asyncio.gather(
        inspect("--strict", "--method", "tools/list", *start, env=env),
        inspect(
            "--method", "tools/call", "--tool-name", "scribe__stats",
            "--tool-arg", "text=seen by the inspector", *start, env=env,
        ),
    )  # fmt: skip
    assert listed.status == 0, listed.stderr  # 6: a schema error under --strict
    tools = {tool["name"]: tool for tool in listed.answer["tools"]}
    assert {"scribe__echo", "scribe__stats", "registry__list_agents"} <= set(tools)
    assert tools["scribe__stats"]["outputSchema"]["required"] == ["words", "letters"]
    assert stats.status == 0, stats.stderr
    assert stats.answer["structuredContent"] == {"words": 4, "letters": 18}


async def test_the_inspector_calls_the_team_over_http_with_a_key(
    team: Team, tmp_path: Path
) -> None:
    """--header Authorization: Bearer KEY: calls go on the bus as alice; errors keep their code."""
    scribe = await team.add(
        Scribe(agent_id="scribe-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    )
    server = await team.serve_http()
    await wait_until(lambda: "scribe__echo" in server.tools, 15)
    reach = ["--header", f"Authorization: Bearer {KEY}", "--", team.url]
    env = own_catalog(tmp_path)
    call = ["--method", "tools/call", "--tool-name"]
    echoed, refused, card = await asyncio.gather(
        inspect(*call, "scribe__echo", "--tool-arg", "text=by key", *reach, env=env),
        inspect(*call, "scribe__refuse", "--tool-arg", "text=calls", *reach, env=env),
        inspect("--method", "resources/read", "--uri", "agentbus://agents/scribe", *reach, env=env),
    )
    assert echoed.status == 0, echoed.stderr
    assert echoed.answer["structuredContent"] == {"result": "by key"}
    assert scribe.senders[0].startswith("alice-")
    assert refused.status != 0  # the Inspector's exit status for a tool error
    assert refused.answer["isError"] is True
    assert refused.answer["_meta"]["agentbus/error"]["code"] == "quota_exceeded"
    assert card.status == 0, card.stderr
    assert json.loads(card.answer["contents"][0]["text"])["version"] == "1.2.0"
