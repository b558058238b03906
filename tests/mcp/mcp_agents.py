"""Agents the MCP tests put on the bus."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, Field

from agentbus import (
    Agent,
    AgentBusError,
    QuestionDeclined,
    ask,
    current_request,
    report_progress,
    skill,
)


class TextStats(BaseModel):
    """Counts of a text."""

    words: int
    letters: int


class Scribe(Agent):
    name = "scribe"
    description = "Writes, counts, streams, waits and refuses"
    version = "1.2.0"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.senders: list[str] = []
        """The sender of every request that reached a skill."""
        self.waiting = asyncio.Event()
        """Set once a ``wait`` call has begun."""
        self.ended: list[str] = []
        """How each ``wait`` call ended: ``done`` or ``cancelled``."""

    @skill
    async def echo(self, text: str) -> str:
        """Return the text as it came."""
        self.senders.append(current_request().sender_id)
        return text

    @skill
    async def stats(self, text: str) -> TextStats:
        """Count the words and letters of a text."""
        self.senders.append(current_request().sender_id)
        return TextStats(words=len(text.split()), letters=sum(c.isalpha() for c in text))

    @skill
    async def steps(self, words: list[str]) -> AsyncIterator[str]:
        """Report progress, then stream each word as a partial result."""
        await report_progress(0.5, "halfway there")
        for word in words:
            yield word.upper()

    @skill
    async def wait(self, seconds: float) -> str:
        """Sleep ``seconds``, then say so."""
        self.waiting.set()
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self.ended.append("cancelled")
            raise
        self.ended.append("done")
        return f"waited {seconds:g}s"

    @skill
    async def refuse(self, text: str) -> str:
        """Answer with the error ``quota_exceeded``."""
        raise AgentBusError(f"no more {text} today", code="quota_exceeded", details={"left": 0})


class Shouter(Agent):
    name = "shouter"
    description = "Shouts text"

    @skill
    async def shout(self, text: str) -> str:
        """Return the text in capitals."""
        return text.upper()


class Trip(BaseModel):
    """Where to, and for how long."""

    city: str
    nights: int = Field(ge=1, le=30)


class Stop(BaseModel):
    city: str


class Clerk(Agent):
    """Asks its caller what it needs (``agentbus.ask``): the asking agent of the MCP tests."""

    name = "clerk"
    description = "Books trips, asking where to and whether to go ahead"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.booked: list[str] = []
        """Each trip booked: the effect after the last question, done once."""

    @skill
    async def book(self, who: str) -> str:
        """Ask where to and for how long, then whether to book it."""
        trip = await ask(f"Where to, {who}?", Trip)
        if not await ask(f"Book {trip.nights} nights in {trip.city}?", bool):
            return "not booked"
        self.booked.append(f"{who}: {trip.city}")
        return f"booked {trip.nights} nights in {trip.city} for {who}"

    @skill
    async def polite(self, who: str) -> str:
        """Ask a name; a declined question is answered, not failed."""
        try:
            name = await ask(f"What should I call {who}?")
        except QuestionDeclined:
            return f"no name for {who}"
        return f"hello {name}"

    @skill
    async def route(self, start: str) -> str:
        """Ask for a list of stops: an answer no MCP form can ask for."""
        stops = await ask(f"Which stops after {start}?", list[Stop])
        return " -> ".join([start, *(stop.city for stop in stops)])
