"""Waiting on a condition in tests: polled, with a deadline; shared by every tier."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def wait_until(
    predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.01
) -> None:
    """Wait until ``predicate()`` holds, polling; fail the test after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 - a condition on counters, not an event
            await asyncio.sleep(interval)
