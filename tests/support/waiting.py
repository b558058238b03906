"""Waiting on a condition in tests: polled, with a deadline; shared by every tier."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


async def wait_until(
    predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.01
) -> None:
    """Wait until ``predicate()`` holds, polling; fail the test after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 - a condition on counters, not an event
            await asyncio.sleep(interval)


async def eventually(
    probe: Callable[[], T | None], seconds: float, what: str, interval: float = 0.1
) -> T:
    """Call the blocking ``probe`` in a thread until it returns a value; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    last: object = "no answer yet"
    while True:
        try:
            value = await asyncio.to_thread(probe)
        except (OSError, ValueError) as exc:  # urllib errors are OSErrors
            last = f"{type(exc).__name__}: {exc}"
        else:
            if value is not None:
                return value
            last = "answered, condition not met"
        if time.monotonic() >= deadline:
            pytest.fail(f"waited {seconds:.1f} s for {what}; last: {last}", pytrace=False)
        await asyncio.sleep(interval)
