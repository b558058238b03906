"""The tier's outside tools: the MCP Inspector's CLI and a published MCP server (npm).

``scripts/ensure-mcp-tools`` installs them (the test command calls it). Without one, a
test skips, or fails under CI (``CI`` / ``AGENTBUS_REQUIRE_BROKER`` set).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.required import missing

TOOLS = Path(__file__).resolve().parent / "tools"
BIN = TOOLS / "node_modules" / ".bin"
ENSURE = "./scripts/ensure-mcp-tools installs it"


def npm_tool(name: str) -> list[str]:
    """``node`` and the script of the npm package binary ``name``; skip or fail without it."""
    node = shutil.which("node")
    if node is None:
        missing(f"node is not installed; {ENSURE}")
    script = BIN / name
    if not script.exists():
        missing(f"{name} is not installed in {TOOLS}; {ENSURE}")
    return [node, str(script.resolve())]


@dataclass
class Inspected:
    """One run of the Inspector's CLI: its exit status, its JSON answer, its stderr."""

    status: int
    answer: Any
    stderr: str


async def inspect(*args: str, env: dict[str, str] | None = None, timeout: float = 90) -> Inspected:
    """Run ``mcp-inspector --cli ARGS`` (its own catalog in a scratch file); parse stdout."""
    command = [*npm_tool("mcp-inspector"), "--cli", *args]
    done = await asyncio.to_thread(
        subprocess.run, command, env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    try:
        answer = json.loads(done.stdout) if done.stdout.strip() else None
    except json.JSONDecodeError:
        answer = done.stdout
    return Inspected(done.returncode, answer, done.stderr)
