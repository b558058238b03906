"""Helpers for the chaos tier: bounded waits, and the type of the ``open_bus`` fixture."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import aio_pika
import pytest

from agentbus import AgentBusError, Bus

T = TypeVar("T")


class BusOpener(Protocol):
    async def __call__(self, url: str, agent_id: str | None = None, **settings: Any) -> Bus: ...


async def eventually(probe: Callable[[], Awaitable[T | None]], seconds: float, what: str) -> T:
    """Call ``probe`` until it returns a value (a bus error is a no); fail after ``seconds``."""
    last = "no answer yet"
    try:
        async with asyncio.timeout(seconds):
            while True:
                try:
                    value = await probe()
                except (AgentBusError, aio_pika.exceptions.AMQPError, OSError) as exc:
                    last = f"{type(exc).__name__}: {exc}"
                else:
                    if value is not None:
                        return value
                await asyncio.sleep(0.05)
    except TimeoutError:
        pytest.fail(f"waited {seconds} s for {what}; last: {last}", pytrace=False)


async def until(predicate: Callable[[], bool], seconds: float, what: str) -> float:
    """Wait until ``predicate()`` holds; return the time it took; fail after ``seconds``."""
    began = time.monotonic()
    try:
        async with asyncio.timeout(seconds):
            while not predicate():  # noqa: ASYNC110 - a condition on counters, not an event
                await asyncio.sleep(0.02)
    except TimeoutError:
        pytest.fail(f"waited {seconds} s for {what}", pytrace=False)
    return time.monotonic() - began
