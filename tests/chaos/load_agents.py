"""Agents for the load tests: ``agentbus run load_agents:FanInWorker`` (from this directory)."""

from __future__ import annotations

from chaos_agents import LedgerWorker

from agentbus import skill


class FanInWorker(LedgerWorker):
    """A ledger worker that can also gather a fan-out's results (served as ``ledger-worker``)."""

    concurrency = 16

    @skill
    async def gather(self, keys: list[str]) -> dict[str, int]:
        """Count the effect keys of the subtasks fanned in: all of them, and the distinct."""
        return {"count": len(keys), "distinct": len(set(keys))}
