"""Agents for the process tests: run with `agentbus run sample_agents:Alpha` (PYTHONPATH here)."""

from __future__ import annotations

import asyncio

from agentbus import Agent, skill


class Alpha(Agent):
    name = "alpha"
    description = "Doubles numbers, and sleeps on request"

    @skill
    async def double(self, n: int) -> int:
        """Return twice ``n``."""
        return 2 * n

    @skill
    async def slow(self, seconds: float) -> str:
        """Sleep ``seconds``, then say so."""
        await asyncio.sleep(seconds)
        return f"slept {seconds:g}s"


class Beta(Agent):
    name = "beta"
    description = "Shouts text"

    @skill
    async def shout(self, text: str) -> str:
        """Return ``text`` in capitals."""
        return text.upper()
