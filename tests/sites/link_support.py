"""Helpers of the link-fault tests: a caller that records each request in the ledger, and
the ledger's rows as a table to print."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from agentbus import AgentBusError, Bus, ConnectionLost, RemoteError, RequestTimeout
from agentbus.envelopes import Metadata, RequestEnvelope, RequestPayload, ResponseEnvelope, utcnow
from agentbus.testing.chaos import Ledger, SendOutcome, queue_depths


@dataclass(frozen=True)
class Ending:
    """How one request ended: ``response``, ``timeout`` or ``error:<class>``, and when."""

    detail: str
    seconds: float
    reply: ResponseEnvelope | None = None
    error: AgentBusError | None = None


@dataclass
class Caller:
    """Sends requests to ``service`` from ``bus``; records each one in the ledger once."""

    bus: Bus
    ledger: Ledger
    service: str
    label: str
    endings: list[Ending] = field(default_factory=list)

    async def call(self, timeout: float = 10.0, **parameters: Any) -> Ending:
        """Send one ``work`` request and wait for its end."""
        envelope = RequestEnvelope(
            sender_id=self.bus.agent_id,
            receiver_id=self.service,
            payload=RequestPayload(action="work", parameters=parameters),
            metadata=Metadata(deadline=utcnow() + timedelta(seconds=timeout)),
        )
        began = time.monotonic()
        outcome, detail = SendOutcome.CONFIRMED, "response"
        reply: ResponseEnvelope | None = None
        error: AgentBusError | None = None
        try:
            reply = await self.bus.send_request(envelope, timeout=timeout)
        except RemoteError as exc:
            outcome, detail, error = SendOutcome.FAILED, f"error:{exc.code}", exc
        except RequestTimeout as exc:
            outcome, detail, error = SendOutcome.UNKNOWN, "timeout", exc
        except ConnectionLost as exc:
            outcome, detail, error = SendOutcome.UNKNOWN, "error:ConnectionLost", exc
        except AgentBusError as exc:
            outcome, detail, error = SendOutcome.FAILED, f"error:{type(exc).__name__}", exc
        finally:
            self.ledger.record_send(
                envelope.message_id, outcome, producer=self.label, detail=detail
            )
        ending = Ending(detail, time.monotonic() - began, reply, error)
        self.endings.append(ending)
        return ending

    async def served(self, timeout: float = 5.0) -> Ending | None:
        """One request; its ending if answered, else None (a probe for ``eventually``)."""
        ending = await self.call(timeout=timeout)
        return ending if ending.reply is not None else None


async def until_true(probe: Callable[[], Awaitable[bool]], seconds: float, what: str) -> float:
    """Wait until ``probe()`` is true (polled); return the seconds it took."""
    began = time.monotonic()
    try:
        async with asyncio.timeout(seconds):
            while not await probe():  # noqa: ASYNC110 - a broker queue polled, no event
                await asyncio.sleep(0.05)
    except TimeoutError:
        pytest.fail(f"waited {seconds} s for {what}", pytrace=False)
    return time.monotonic() - began


async def heard(url: str, beacon: str) -> bool:
    """Whether the beacon queue ``beacon`` at ``url`` holds a heartbeat."""
    with contextlib.suppress(AgentBusError, OSError):
        return (await queue_depths(url, [beacon]))[beacon].messages > 0
    return False


def ledger_rows(ledger: Ledger) -> str:
    """The ledger as a table: each request by when it ended (seconds from the first), how,
    and how many times its effect was executed."""
    with contextlib.closing(sqlite3.connect(ledger.path)) as db:
        first = db.execute("SELECT min(at) FROM sends").fetchone()[0] or 0.0
        done = dict(db.execute("SELECT message_id, count(*) FROM effects GROUP BY message_id"))
        rows = db.execute(
            "SELECT message_id, producer, outcome, detail, at FROM sends ORDER BY at, rowid"
        ).fetchall()
    lines = [f"{'ended':>7}  {'message':8}  {'caller':12} {'outcome':9} {'ending':26} done"]
    lines += [
        f"{at - first:7.2f}  {message_id[:8]}  {producer:12} {outcome:9} {detail:26} "
        f"{done.get(message_id, 0)}"
        for message_id, producer, outcome, detail, at in rows
    ]
    return "\n".join(lines)
