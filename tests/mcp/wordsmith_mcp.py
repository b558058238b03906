"""An MCP server built on the official SDK (``MCPServer``), for run-mcp to put on the bus.

Run as a script it serves over stdio; ``--http PORT`` serves Streamable HTTP on 127.0.0.1.
Tests also build it in their own process (``wordsmith``) to watch what it was asked.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass, field

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel


class Stats(BaseModel):
    """Counts of a text."""

    words: int
    letters: int


@dataclass
class Seen:
    """What the server was asked, and how its ``wait`` calls ended."""

    asked: list[str] = field(default_factory=list)
    waiting: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: list[str] = field(default_factory=list)


def wordsmith(seen: Seen | None = None) -> MCPServer:
    """The server: ``reverse`` (text), ``stats`` (structured), ``wait`` (progress), ``refuse``."""
    seen = seen or Seen()
    server = MCPServer("Word smith", instructions="Plays with words.", version="3.1.0")

    @server.tool()
    def reverse(text: str) -> str:
        """Reverse the order of the words."""
        seen.asked.append("reverse")
        return " ".join(reversed(text.split()))

    @server.tool()
    def stats(text: str) -> Stats:
        """Count the words and letters."""
        seen.asked.append("stats")
        return Stats(words=len(text.split()), letters=sum(c.isalpha() for c in text))

    @server.tool(name="slow.wait")
    async def wait(seconds: float, ctx: Context) -> str:
        """Report progress, then sleep ``seconds``."""
        seen.asked.append("wait")
        await ctx.report_progress(1, 2, f"waiting {seconds:g}s")
        seen.waiting.set()
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            seen.cancelled.append("wait")
            raise
        return "waited"

    @server.tool()
    def refuse(text: str) -> str:
        """Always fails."""
        seen.asked.append("refuse")
        raise ToolError(f"refused {text!r}, as always")

    return server


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP")
    port = parser.parse_args().http
    if port is None:
        wordsmith().run()
    else:
        wordsmith().run("streamable-http", host="127.0.0.1", port=port)
