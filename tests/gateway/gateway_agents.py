"""Agents the gateway tests put on the bus."""

from __future__ import annotations

import asyncio
from typing import Any

from agentbus import (
    Agent,
    AgentBusError,
    QuestionDeclined,
    ask,
    current_request,
    report_progress,
    skill,
)


class Calc(Agent):
    name = "calc"
    description = "Doubles numbers, sleeps, and fails on request"
    version = "2.1.0"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen: list[tuple[str, str]] = []
        """(skill, sender_id) of every request that reached a skill."""
        self.ended: list[str] = []
        """How each ``slow`` call ended: ``done`` or ``cancelled``."""

    @skill
    async def double(self, n: int) -> int:
        """Return twice ``n``."""
        self.seen.append(("double", current_request().sender_id))
        return 2 * n

    @skill
    async def slow(self, seconds: float) -> str:
        """Sleep ``seconds``, then say so."""
        self.seen.append(("slow", current_request().sender_id))
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self.ended.append("cancelled")
            raise
        self.ended.append("done")
        return f"slept {seconds:g}s"

    @skill
    async def steps(self, count: int) -> int:
        """Report progress ``count`` times, then return ``count``."""
        self.seen.append(("steps", current_request().sender_id))
        for step in range(count):
            await report_progress((step + 1) / count, f"step {step + 1} of {count}")
        return count

    @skill
    async def fail(self, code: str) -> None:
        """Answer with the error ``code``."""
        self.seen.append(("fail", current_request().sender_id))
        raise AgentBusError(f"failed as asked: {code}", code=code)


class Shouter(Agent):
    name = "shouter"
    description = "Shouts text"

    @skill
    async def shout(self, text: str) -> str:
        """Return ``text`` in capitals."""
        return text.upper()


class Counter(Agent):
    name = "counter"
    description = "Counts words"

    @skill
    async def count(self, text: str, shortest: int = 1) -> dict[str, int]:
        """Return the number of words in ``text`` of at least ``shortest`` letters."""
        return {"words": len([word for word in text.split() if len(word) >= shortest])}


class Writer(Agent):
    name = "writer"
    description = "Drafts text from section headings, and summarises text"

    @skill
    async def draft(self, title: str, sections: list[str]) -> str:
        """Return the title and one sentence per section."""
        return f"{title}. " + " ".join(f"On {section}." for section in sections)

    @skill
    async def summary(self, text: str) -> dict[str, Any]:
        """Return the word count and the first sentence of ``text``."""
        return {"words": len(text.split()), "first": text.split(".")[0]}


class Clerk(Agent):
    name = "clerk"
    description = "Books trips, asking where to and for how long"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.declined: list[str] = []
        """Who each declined question was for."""

    @skill
    async def book(self, who: str) -> str:
        """Book a trip for ``who``: ask where to, then how many nights."""
        try:
            city = await ask(f"Where to, {who}?")
        except QuestionDeclined:
            self.declined.append(who)
            raise
        nights = await ask(f"How many nights in {city}?", int)
        return (
            f"booked {nights} nights in {city} for {who} in {current_request().metadata.context_id}"
        )

    @skill
    async def sign_in(self, who: str) -> str:
        """Ask for an authorization, then say who signed in."""
        token = await ask(f"A token for {who}, please", kind="auth")
        return f"{who} signed in with {token}"


class Chatter(Agent):
    name = "chatter"
    description = "Chats: takes text, and asks for more until told no"

    @skill
    async def chat(self, text: str) -> str:
        """Ask for more after ``text`` until the answer is no; return all that was said."""
        said = [text]
        while (more := await ask("Anything else?")).strip().lower() not in ("", "no", "bye"):
            said.append(more)
        return " / ".join(said)
