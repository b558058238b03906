"""Agents for the process tests: run with `agentbus run sample_agents:Alpha` (PYTHONPATH here)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

import structlog
from pydantic import Field

from agentbus import Agent, Artifact, ask, put_artifact, report_progress, skill
from agentbus.agents import current_request

_log = structlog.get_logger("sample_agents")


class Alpha(Agent):
    name = "alpha"
    description = "Doubles numbers, and sleeps on request"

    @skill
    async def double(self, n: int) -> int:
        """Return twice ``n``."""
        return 2 * n

    @skill
    async def slow(self, seconds: float) -> str:
        """Sleep ``seconds``, then say so."""
        await asyncio.sleep(seconds)
        return f"slept {seconds:g}s"

    @skill
    async def spell(self, word: str) -> AsyncIterator[str]:
        """Spell ``word`` letter by letter, saying how far it is."""
        for n, letter in enumerate(word):
            await report_progress(n / len(word), f"letter {n + 1} of {len(word)}")
            yield letter


class Beta(Agent):
    name = "beta"
    description = "Shouts text"

    @skill
    async def shout(self, text: str) -> str:
        """Return ``text`` in capitals."""
        return text.upper()


class Writer(Agent):
    name = "writer"
    description = "Outlines a topic, drafts text from sections, summarises text"

    @skill
    async def outline(self, topic: str) -> dict[str, Any]:
        """Return a title and three section headings for ``topic``."""
        return {"title": topic.title(), "sections": [f"{topic} {n}" for n in range(3)]}

    @skill
    async def draft(self, sections: list[str]) -> str:
        """Return one sentence per section."""
        return " ".join(f"{section}." for section in sections)

    @skill
    async def summary(self, text: str) -> dict[str, Any]:
        """Return the word count and the first sentence of ``text``."""
        return {"words": len(text.split()), "first": text.split(".")[0]}


class Worker(Agent):
    name = "worker"
    description = "Squares and sums numbers; fails or hangs on request"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._hanging = asyncio.Event()

    @skill
    async def square(self, n: int, delay: float = 0.0) -> int:
        """Return ``n`` squared, after ``delay`` seconds of work."""
        if delay:
            await asyncio.sleep(delay)
        return n * n

    @skill
    async def numbers(self, n: int) -> list[int]:
        """Return the numbers 0 to ``n - 1`` (a list a mapped step runs over)."""
        return list(range(n))

    @skill
    async def total(self, values: list[int]) -> int:
        """Return the sum of ``values``."""
        return sum(values)

    @skill
    async def power(self, n: int) -> int:
        """Ask which power of ``n`` to take (an integer from 0 to 5), and take it."""
        exponent = await ask(f"Which power of {n}?", Annotated[int, Field(ge=0, le=5)])
        return int(n**exponent)

    @skill
    async def fail(self, why: str = "broken", after_hang: bool = False) -> None:
        """Raise ``ValueError(why)``; with ``after_hang``, once a ``hang`` here has started."""
        if after_hang:
            await asyncio.wait_for(self._hanging.wait(), timeout=30)
        raise ValueError(why)

    @skill
    async def hang(self) -> str:
        """Wait until cancelled, logging "hang started" and "hang cancelled"."""
        log = _log.bind(agent_id=self.id, subtask_id=_subtask_id())
        log.info("hang started")
        self._hanging.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            log.info("hang cancelled")
            raise
        return "never"


def _subtask_id() -> Any:
    """The leader's ``subtask_id`` in the metadata of the request being served, if any."""
    return (current_request().metadata.model_extra or {}).get("subtask_id")


def _rss_kib(field: str) -> int:
    # VmRSS: now; VmHWM: the peak since the process started, or since _reset_peak.
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    raise LookupError(field)


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
        clear.write("5")  # resets VmHWM to the RSS of now (Linux 4.0 and later)


async def _pseudo_random(size: int, piece: int = 256 * 1024) -> AsyncIterator[bytes]:
    # Bytes no compression or de-duplication can shrink, made a piece at a time.
    import hashlib

    block = hashlib.sha256(b"agentbus").digest() * (piece // 32)
    sent = 0
    while sent < size:
        block = hashlib.sha256(block[:32]).digest() + block[32:]
        chunk = block[: min(piece, size - sent)]
        sent += len(chunk)
        yield chunk


class Maker(Agent):
    name = "maker"
    description = "Makes large artifacts, a piece at a time"

    @skill
    async def make(self, size: int, reader: str | None = None) -> dict[str, Any]:
        """Store ``size`` pseudo-random bytes for ``reader``; say the peak RSS meanwhile."""
        _reset_peak()
        before = _rss_kib("VmRSS")
        artifact = await put_artifact(_pseudo_random(size), name="made.bin", reader=reader)
        return {"artifact": artifact.wire(), "rss_kib": before, "peak_kib": _rss_kib("VmHWM")}

    @skill
    async def big_list(self, count: int) -> list[str]:
        """A result far over the envelope's cap: it goes by reference."""
        return [f"item-{n:08d}" for n in range(count)]


class Digester(Agent):
    name = "digester"
    description = "Reads artifacts in chunks and hashes them"

    @skill
    async def digest(self, document: Artifact) -> dict[str, Any]:
        """Hash ``document`` read in chunks; say the peak RSS meanwhile."""
        import hashlib

        _reset_peak()
        before = _rss_kib("VmRSS")
        digest, size = hashlib.sha256(), 0
        async for chunk in document.open():
            digest.update(chunk)
            size += len(chunk)
        peak = _rss_kib("VmHWM")
        return {"sha256": digest.hexdigest(), "size": size, "rss_kib": before, "peak_kib": peak}

    @skill
    async def count(self, items: list[str]) -> int:
        """How many items came (parameters far over the cap go by reference)."""
        return len(items)
