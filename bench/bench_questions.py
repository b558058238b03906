"""What a question costs: the round trip it adds to a request, and an agent's memory per open one.

One agent process (``Asker``: ``plain`` answers at once, ``asks`` asks one question first)
on its own exchange; this process is the client. Round trip: rounds of a plain request
and an asked-and-answered one, interleaved, timed end to end (request, question, answer,
result); the figure is the p50 each, and what the question adds. Memory: the agent's RSS
(/proc) after a warm-up, after 10,000 plain requests, and after 10,000 requests whose
questions are left open, each set on a fresh agent: bytes per open question against bytes
per plain request (both kept in the agent's de-duplication window; an open question holds
nothing else there: its record is on the broker's stream).

    .venv/bin/python bench/bench_questions.py            # 400 rounds, 10,000 questions
    .venv/bin/python bench/bench_questions.py --quick    # 100 rounds, 2,000 questions
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from agentbus import Agent, InputRequired, Settings, ask, connect, skill

HERE = Path(__file__).resolve().parent


class Asker(Agent):
    """The agent under test (``agentbus run bench_questions:Asker``)."""

    name = "asker"
    concurrency = 64

    @skill
    async def plain(self, n: int) -> int:
        return n

    @skill
    async def asks(self, n: int) -> int:
        return n + await ask("How much more?", int)


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _start(url: str, exchange: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "agentbus", "--url", url, "--exchange", exchange]
    command += ["--log-level", "warning", "run", "bench_questions:Asker", "--id", "asker-1"]
    env = {**os.environ, "PYTHONPATH": str(HERE), "AGENTBUS_LOOP": "asyncio"}
    return subprocess.Popen(command, env=env, cwd=HERE, stdout=subprocess.DEVNULL)


async def _ready(bus: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            await bus.request("asker", "ping", timeout=1)  # type: ignore[attr-defined]
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)  # the agent process is starting: nothing to wait on


async def round_trips(url: str, rounds: int) -> dict[str, float]:
    """p50 and p90 (ms) of a plain request and of one asked and answered, interleaved."""
    exchange = f"bench-questions-{uuid.uuid4().hex[:8]}"
    agent = _start(url, exchange)
    try:
        async with connect(url, exchange=exchange) as bus:
            await _ready(bus)
            plain, asked = [], []
            for n in range(rounds):
                began = time.perf_counter()
                await bus.request("asker", "plain", {"n": n}, timeout=10)
                plain.append(time.perf_counter() - began)
                began = time.perf_counter()
                try:
                    await bus.request("asker", "asks", {"n": n}, timeout=10)
                except InputRequired as question:
                    await bus.answer(question.question, 1, timeout=10)
                asked.append(time.perf_counter() - began)
    finally:
        agent.terminate()
        agent.wait(timeout=20)
    p50 = (
        statistics.median(plain[rounds // 10 :]) * 1e3,
        statistics.median(asked[rounds // 10 :]) * 1e3,
    )
    return {
        "plain_p50_ms": round(p50[0], 3),
        "asked_p50_ms": round(p50[1], 3),
        "added_p50_ms": round(p50[1] - p50[0], 3),
        "ratio": round(p50[1] / p50[0], 2),
        "plain_p90_ms": round(statistics.quantiles(plain, n=10)[-1] * 1e3, 3),
        "asked_p90_ms": round(statistics.quantiles(asked, n=10)[-1] * 1e3, 3),
    }


async def memory(url: str, count: int, action: str) -> dict[str, float]:
    """The agent's RSS growth over ``count`` requests of ``action`` (questions left open)."""
    exchange = f"bench-questions-{uuid.uuid4().hex[:8]}"
    agent = _start(url, exchange)
    try:
        async with connect(url, exchange=exchange) as bus:
            await _ready(bus)
            for n in range(200):  # warm-up: imports, caches, the journal's channel
                await _one(bus, action, n)
            before = _rss(agent.pid)
            for start in range(0, count, 100):
                await asyncio.gather(*(_one(bus, action, n) for n in range(start, start + 100)))
            after = _rss(agent.pid)
    finally:
        agent.terminate()
        agent.wait(timeout=20)
    return {
        f"{action}_rss_before_mb": round(before / 2**20, 1),
        f"{action}_rss_after_mb": round(after / 2**20, 1),
        f"{action}_bytes_each": round((after - before) / count),
    }


async def _one(bus: object, action: str, n: int) -> None:
    with contextlib.suppress(InputRequired):  # left open: what is measured
        await bus.request("asker", action, {"n": n}, timeout=30)  # type: ignore[attr-defined]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=Settings().url)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds, count = (100, 2_000) if args.quick else (400, 10_000)
    figures = {"rounds": rounds, "questions": count}
    figures |= await round_trips(args.url, rounds)
    figures |= await memory(args.url, count, "plain")
    figures |= await memory(args.url, count, "asks")
    figures["open_question_vs_plain_request"] = round(
        figures["asks_bytes_each"] / max(figures["plain_bytes_each"], 1), 2
    )
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
