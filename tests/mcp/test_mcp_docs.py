"""docs/mcp.md, run as written: each block marked ``tested-by`` this file, in order.

Shell lines ending in ``&`` start processes (SIGTERMed at the end: each must exit 0), ``kill``
stops them, and every other line must exit 0, tried again for a while as a user would while
the team starts; the Python block runs with top-level await, tried again the same way. The
page's port 8090 is replaced by a free one, ``/tmp/notes`` by a folder of the test's,
``npx`` packages by the ones ``scripts/ensure-mcp-tools`` installed, and the exchange is the
test's own (the Inspector is told it with ``-e``, as it passes its server no environment).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_tools import npm_tool

from support.broker import delete_topology
from support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- tested-by: tests/mcp/test_mcp_docs.py -->"
RETRY_FOR = 30.0


def page_blocks() -> list[tuple[str, str]]:
    """The (language, text) of each block of docs/mcp.md under this file's mark, in order."""
    text = (ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")
    return re.findall(re.escape(MARK) + r"\s*```(\w+)\n(.*?)```", text, re.DOTALL)


class Page:
    """Runs the page's blocks for one test: its processes, substitutions and environment."""

    def __init__(self, broker_url: str, tmp_path: Path) -> None:
        self.exchange = f"test-mcp-docs-{uuid.uuid4().hex[:8]}"
        self.cwd = tmp_path
        self.notes = tmp_path / "notes"
        self.port = free_port()
        self.env = {
            **os.environ,
            "AGENTBUS_URL": broker_url,
            "AGENTBUS_EXCHANGE": self.exchange,
            "AGENTBUS_LOG_LEVEL": "warning",
            "AGENTBUS_INSTANCE_QUEUE_EXPIRES": "5",
            "MCP_CATALOG_PATH": str(tmp_path / "catalog.json"),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        self.background: list[asyncio.subprocess.Process] = []

    def local(self, text: str) -> str:
        """The page's text with this test's port, folder, npm packages and exchange."""
        inspector = shlex.join(npm_tool("mcp-inspector"))
        filesystem = shlex.join(npm_tool("mcp-server-filesystem"))
        text = text.replace("8090", str(self.port)).replace("/tmp/notes", str(self.notes))
        text = text.replace("npx -y @modelcontextprotocol/server-filesystem", filesystem)
        exchange = shlex.quote(f"AGENTBUS_EXCHANGE={self.exchange}")
        pythonpath = os.environ.get("PYTHONPATH")  # the tests run from a source tree
        told = f"-e {exchange}" + (
            f" -e {shlex.quote(f'PYTHONPATH={pythonpath}')}" if pythonpath else ""
        )
        return text.replace(
            "npx @modelcontextprotocol/inspector --cli", f"{inspector} --cli {told}"
        )

    async def shell(self, block: str) -> list[str]:
        """Run a shell block; return what each foreground line printed."""
        printed: list[str] = []
        for line in self.local(block).splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            if words[0] == "kill":
                await self.stop()
            elif words[-1] == "&":
                started = await asyncio.create_subprocess_exec(
                    *words[:-1], cwd=self.cwd, env=self.env
                )
                self.background.append(started)
            else:
                printed.append(await self.until_ok(line))
        return printed

    async def until_ok(self, line: str) -> str:
        deadline = time.monotonic() + RETRY_FOR
        while True:
            done = await asyncio.to_thread(
                subprocess.run, line, shell=True, cwd=self.cwd, env=self.env,
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            if done.returncode == 0:
                return done.stdout
            if time.monotonic() > deadline:
                pytest.fail(f"{line!r} exited {done.returncode}: {done.stderr[-2000:]}")
            await asyncio.sleep(0.5)

    async def python(self, block: str) -> str:
        """Run a Python block (top-level await) until it runs through; return what it printed."""
        code = compile(
            self.local(block), "docs/mcp.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        )
        deadline = time.monotonic() + RETRY_FOR
        while True:
            printed = io.StringIO()
            try:
                with contextlib.redirect_stdout(printed):
                    await eval(code, {"__name__": "__docs__"})
                return printed.getvalue()
            except Exception:
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.5)

    async def stop(self) -> None:
        """SIGTERM the background processes; each must exit 0."""
        for process in self.background:
            process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            codes = [await process.wait() for process in self.background]
        self.background.clear()
        assert codes == [0] * len(codes)


@pytest.fixture
async def page(broker_url: str, tmp_path: Path) -> AsyncIterator[Page]:
    built = Page(broker_url, tmp_path)
    try:
        yield built
    finally:
        for process in built.background:
            if process.returncode is None:
                process.kill()
                await process.wait()
        await delete_topology(broker_url, built.exchange)


def test_the_page_has_the_blocks_this_file_runs() -> None:
    """sh, python, json, sh (the team server); json, sh (run-mcp): what the tests below run."""
    assert [lang for lang, _ in page_blocks()] == ["sh", "python", "json", "sh", "json", "sh"]


async def test_the_team_as_an_mcp_server_runs_as_written(page: Page) -> None:
    """Over HTTP with a key (the SDK's client), from a desktop client's configuration, and
    by the Inspector's command line."""
    team, client, desktop, inspector, _, _ = page_blocks()
    await page.shell(team[1])
    printed = (await page.python(client[1])).splitlines()
    assert "'text__stats'" in printed[0]
    assert printed[1] == "2"
    config = json.loads(desktop[1])["mcpServers"]["agentbus"]
    env = {**page.env, **config["env"], "AGENTBUS_URL": page.env["AGENTBUS_URL"]}
    server = StdioServerParameters(command=config["command"], args=config["args"], env=env)
    async with Client(server) as session:
        called = await session.call_tool("text__stats", {"text": "From the desktop."})
    assert called.structured_content is not None
    assert called.structured_content["words"] == 3
    [answer] = await page.shell(inspector[1])
    assert json.loads(answer)["structuredContent"]["sentences"] == 2
    await page.stop()


async def test_an_mcp_server_joins_a_plan_as_written(page: Page) -> None:
    """run-mcp with server-filesystem beside the text agent; the plan writes and reads a file."""
    *_, plan, commands = page_blocks()
    (page.cwd / "notes-plan.json").write_text(page.local(plan[1]))
    printed = await page.shell(commands[1])
    aggregate: dict[str, Any] = json.loads(printed[-1])
    assert aggregate["status"] == "completed"
    results = {subtask["id"]: subtask["result"] for subtask in aggregate["subtasks"]}
    summary = results["brief"]["summary"]
    assert results["check"] == {"content": summary}
    assert (page.notes / "brief.md").read_text() == summary
