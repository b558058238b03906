"""An MCP server built on the official SDK (``MCPServer``), for run-mcp to put on the bus.

Run as a script it serves over stdio; ``--http PORT`` serves Streamable HTTP on 127.0.0.1.
Tests also build it in their own process (``wordsmith``) to watch what it was asked.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass, field
from typing import Annotated

from mcp.server import MCPServer
from mcp.server.elicitation import AcceptedElicitation
from mcp.server.mcpserver import Context, Elicit, ElicitationResult, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field


class Stats(BaseModel):
    """Counts of a text."""

    words: int
    letters: int


class Signer(BaseModel):
    """Who signs."""

    name: str = Field(min_length=2)


class Sure(BaseModel):
    sure: bool


def who_signs(text: str) -> Elicit[Signer]:
    """The first question of ``sign``: it needs the tool's argument."""
    return Elicit(f"Who signs {text!r}?", Signer)


def sure_to_sign(who: Annotated[Signer, Resolve(who_signs)]) -> Elicit[Sure]:
    """The second question of ``sign``: it needs the first's answer."""
    return Elicit(f"Sign as {who.name}?", Sure)


@dataclass
class Seen:
    """What the server was asked, and how its ``wait`` calls ended."""

    asked: list[str] = field(default_factory=list)
    waiting: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: list[str] = field(default_factory=list)
    signed: list[str] = field(default_factory=list)


def wordsmith(seen: Seen | None = None) -> MCPServer:
    """The server: ``reverse`` (text), ``stats`` (structured), ``wait`` (progress), ``refuse``,
    ``sign`` (two elicitations, the SDK's ``Resolve``: in both protocol eras)."""
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

    @server.tool()
    def sign(
        text: str,
        who: Annotated[Signer, Resolve(who_signs)],
        sure: Annotated[ElicitationResult[Sure], Resolve(sure_to_sign)],
    ) -> str:
        """Ask who signs, then whether to sign; a declined first question fails the call."""
        seen.asked.append("sign")
        if not isinstance(sure, AcceptedElicitation) or not sure.data.sure:
            return "not signed"
        seen.signed.append(f"{text} -- {who.name}")
        return f"{text} -- {who.name}"

    return server


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP")
    port = parser.parse_args().http
    if port is None:
        wordsmith().run()
    else:
        wordsmith().run("streamable-http", host="127.0.0.1", port=port)
