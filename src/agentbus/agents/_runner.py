"""Run an agent in this process until SIGTERM or SIGINT, then drain it."""

from __future__ import annotations

import asyncio
import signal

from agentbus._logging import get_logger
from agentbus.agents._agent import Agent

__all__ = ["run_until_signalled"]

_log = get_logger("agentbus.agents")


async def run_until_signalled(agent: Agent, *, grace: float | None = None) -> None:
    """Start ``agent``, serve until SIGTERM or SIGINT, then stop it gracefully."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    for signum in signals:
        loop.add_signal_handler(signum, stop.set)
    try:
        await agent.start()
        await stop.wait()
        _log.info("signal received: draining", agent_id=agent.id)
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
        await agent.stop(grace)
