"""Helpers of the fault tests: a producer that records every request in the ledger, workers."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import aiormq.exceptions
import pytest
from chaos_agents import LedgerWorker

from agentbus import (
    Agent,
    AgentBusError,
    BrokerUnavailable,
    Bus,
    BusClosed,
    ConnectionLost,
    RemoteError,
    RequestTimeout,
    Settings,
)
from agentbus.envelopes import Metadata, RequestEnvelope, RequestPayload, ResponseEnvelope, utcnow
from agentbus.testing.chaos import Ledger, SendOutcome, queue_depths

AgentT = TypeVar("AgentT", bound=Agent)

SERVICE = LedgerWorker.name
SHUTDOWN_BOUND = 10.0  # seconds agents and buses may take to close on a working network


@dataclass
class Producer:
    """Sends requests to a service and records each one in the ledger with how it ended.

    ``confirmed`` means a response came, ``failed`` an error reply or a clear refusal,
    ``unknown`` a timeout or a publish never confirmed. Each call records exactly once.
    """

    bus: Bus
    ledger: Ledger
    service: str = SERVICE
    calls: int = 0
    responses: list[ResponseEnvelope] = field(default_factory=list)

    async def call(
        self, action: str = "work", timeout: float = 10.0, **parameters: Any
    ) -> ResponseEnvelope | None:
        """Send one request and wait for its end; return the response, if one came."""
        envelope = RequestEnvelope(
            sender_id=self.bus.agent_id,
            receiver_id=self.service,
            payload=RequestPayload(action=action, parameters=parameters),
            metadata=Metadata(deadline=utcnow() + timedelta(seconds=timeout)),
        )
        self.calls += 1
        outcome, detail = SendOutcome.CONFIRMED, "response"
        reply = None
        try:
            reply = await self.bus.send_request(envelope, timeout=timeout)
        except RemoteError as exc:
            outcome, detail = SendOutcome.FAILED, f"error:{exc.code}"
        except RequestTimeout:
            outcome, detail = SendOutcome.UNKNOWN, "timeout"
        except AgentBusError as exc:
            outcome, detail = _undecided(exc), f"error:{type(exc).__name__}"
        finally:
            self.ledger.record_send(
                envelope.message_id, outcome, producer=self.bus.agent_id, detail=detail
            )
        if reply is not None:
            self.responses.append(reply)
        return reply

    async def job(self, action: str = "work", **parameters: Any) -> str:
        """Publish a request without waiting for its answer; confirmed once the broker has it."""
        envelope = RequestEnvelope(
            sender_id=self.bus.agent_id,
            receiver_id=self.service,
            payload=RequestPayload(action=action, parameters=parameters),
        )
        self.calls += 1
        outcome, detail = SendOutcome.CONFIRMED, "published"
        try:
            await self.bus.publish(envelope, timeout=30)
        except AgentBusError as exc:
            outcome, detail = _undecided(exc), f"error:{type(exc).__name__}"
        finally:
            self.ledger.record_send(
                envelope.message_id, outcome, producer=self.bus.agent_id, kind="job", detail=detail
            )
        return envelope.message_id


def _undecided(exc: AgentBusError) -> SendOutcome:
    # A connection lost before the confirm, or the bus closed while waiting for the answer,
    # leaves it open whether the request was taken (BusClosed before a send cannot be told).
    undecided = isinstance(exc, ConnectionLost | BusClosed)
    return SendOutcome.UNKNOWN if undecided else SendOutcome.FAILED


@contextlib.asynccontextmanager
async def steady_traffic(
    producer: Producer, *, lanes: int, limit: int, pause: float = 0.0, **parameters: Any
) -> AsyncIterator[Callable[[], int]]:
    """Keep ``lanes`` requests in flight (at most ``limit`` in all) until the block ends.

    Yields a function returning how many requests have ended so far. On exit no new request
    starts, and the ones in flight run to their own end (each is bounded by its timeout).
    """
    stop = asyncio.Event()
    budget = itertools.count()
    ended = 0

    async def lane() -> None:
        nonlocal ended
        while not stop.is_set() and next(budget) < limit:
            await producer.call(**parameters)
            ended += 1
            if pause:
                await asyncio.sleep(pause)

    tasks = [asyncio.create_task(lane()) for _ in range(lanes)]
    try:
        yield lambda: ended
    finally:
        stop.set()
        await asyncio.gather(*tasks)


class Team:
    """In-process agents of a test; whatever is still running is stopped after it."""

    def __init__(self) -> None:
        self.agents: list[Agent] = []

    async def start(self, agent: AgentT) -> AgentT:
        """Start ``agent`` and keep it for the teardown."""
        self.agents.append(agent)
        await agent.start()
        return agent

    async def workers(
        self, count: int, settings: Settings, ledger: Ledger, prefix: str = "worker"
    ) -> list[LedgerWorker]:
        """Start ``count`` workers ``<prefix>-0``..., each on its own connection."""
        return [
            await self.start(
                LedgerWorker(
                    agent_id=f"{prefix}-{n}", settings=settings, ledger=ledger, heartbeat_interval=1
                )
            )
            for n in range(count)
        ]

    async def aclose(self) -> None:
        """Stop every agent (a no-op for those stopped already), within the bound."""
        await stop_all(*(agent.stop for agent in self.agents))


async def stop_all(*closers: Callable[[], Any], bound: float = SHUTDOWN_BOUND) -> float:
    """Run each closer (``agent.stop``, ``bus.aclose``) together, all within ``bound`` seconds.

    Returns the seconds it took; fails the test if it took longer.
    """
    began = time.monotonic()
    try:
        async with asyncio.timeout(bound):
            await asyncio.gather(*(closer() for closer in closers))
    except TimeoutError:
        pytest.fail(f"shutdown took more than {bound} s", pytrace=False)
    return time.monotonic() - began


async def consumers_back(url: str, queue: str, expected: int, seconds: float) -> float:
    """Wait until ``queue`` has ``expected`` consumers; return the seconds it took."""
    began = time.monotonic()
    seen = -1
    try:
        async with asyncio.timeout(seconds):
            while True:
                with contextlib.suppress(aiormq.exceptions.AMQPError, OSError, BrokerUnavailable):
                    seen = (await queue_depths(url, [queue]))[queue].consumers
                    if seen >= expected:
                        return time.monotonic() - began
                await asyncio.sleep(0.1)
    except TimeoutError:
        pytest.fail(f"{queue}: {seen} consumers after {seconds} s, not {expected}", pytrace=False)


async def wait_for(predicate: Callable[[], bool], seconds: float, what: str) -> float:
    """Wait until ``predicate()`` holds; return the seconds it took; fail after ``seconds``."""
    began = time.monotonic()
    try:
        async with asyncio.timeout(seconds):
            while not predicate():  # noqa: ASYNC110 - a condition on counters, not an event
                await asyncio.sleep(0.05)
    except TimeoutError:
        pytest.fail(f"waited {seconds} s for {what}", pytrace=False)
    return time.monotonic() - began
