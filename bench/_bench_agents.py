"""Trivial agents for suite.py's fan-out: ``agentbus run _bench_agents:Echo`` (PYTHONPATH=bench)."""

from __future__ import annotations

from agentbus import Agent, skill


class Echo(Agent):
    """Does no work at all, so a benchmark measures the plumbing around it."""

    name = "echo"
    description = "Echoes a number; sums a list of numbers"
    concurrency = 64

    @skill
    async def echo(self, n: int) -> int:
        """Return ``n``."""
        return n

    @skill
    async def total(self, values: list[int]) -> int:
        """Return the sum of ``values`` (the fan-in step)."""
        return sum(values)


class Pinger(Agent):
    """The request/response suite's Agent side: a typed skill, run as ``agentbus run`` runs it."""

    name = "pinger"
    description = "Answers with its parameters"
    concurrency = 64

    @skill
    async def answer(self, i: int) -> dict[str, int]:
        """Return ``{"i": i}``."""
        return {"i": i}


class UvPinger(Pinger):
    """The Pinger the ``agent-uvloop`` side asks: its own queue, served on uvloop."""

    name = "pinger-uv"
