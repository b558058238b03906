"""An agent for the process tests: ``agentbus run chaos_agents:Doubler`` (from this directory)."""

from __future__ import annotations

from agentbus import Agent, skill


class Doubler(Agent):
    name = "doubler"
    description = "Doubles numbers"

    @skill
    async def double(self, n: int) -> int:
        """Return twice ``n``."""
        return 2 * n
