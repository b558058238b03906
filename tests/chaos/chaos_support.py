"""Helpers for the chaos tier: bounded waits, and the type of the ``open_bus`` fixture."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

import aio_pika
import pytest

from agentbus import AgentBusError, Bus, Settings

T = TypeVar("T")


class BusOpener(Protocol):
    async def __call__(self, url: str, agent_id: str | None = None, **settings: Any) -> Bus: ...


@contextlib.asynccontextmanager
async def bus_opener(exchange: str) -> AsyncIterator[BusOpener]:
    """Open buses on ``exchange``, at any URL; close them all, newest first, at the end."""
    buses: list[Bus] = []

    async def opener(url: str, agent_id: str | None = None, **settings: Any) -> Bus:
        config = Settings(url=url, exchange=exchange, **settings)
        bus = await Bus(config, agent_id=agent_id).open()
        buses.append(bus)
        return bus

    try:
        yield opener
    finally:
        for bus in reversed(buses):
            await bus.aclose()


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
