"""Agents for the process tests: ``agentbus run chaos_agents:Doubler`` (from this directory)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

from agentbus import Agent, ask, current_request, skill
from agentbus.envelopes import RequestEnvelope
from agentbus.testing.chaos import Ledger


class Doubler(Agent):
    name = "doubler"
    description = "Doubles numbers"

    @skill
    async def double(self, n: int) -> int:
        """Return twice ``n``."""
        return 2 * n


def effect_key(request: RequestEnvelope) -> str:
    """The key an effect is recorded under: a leader's ``plan_id/subtask_id``, else the id."""
    extra = request.metadata.model_extra or {}
    plan_id, subtask_id = extra.get("plan_id"), extra.get("subtask_id")
    if isinstance(plan_id, str) and isinstance(subtask_id, str):
        return f"{plan_id}/{subtask_id}"
    return request.message_id


class LedgerWorker(Agent):
    """Does work whose effect is a row in the ledger (``$AGENTBUS_LEDGER``), before the ack."""

    name = "ledger-worker"
    description = "Works, records each effect in the test's ledger; fails or crashes on request"
    concurrency = 4

    def __init__(self, *, ledger: Ledger | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ledger = ledger or Ledger.from_env()

    async def on_stop(self) -> None:
        self.ledger.close()

    @skill
    async def work(self, seconds: float = 0.0, once: bool = False) -> dict[str, Any]:
        """Work ``seconds``, then record the effect (with ``once``: unless recorded already)."""
        await asyncio.sleep(seconds)
        key = effect_key(current_request())
        applied = True
        if once:
            applied = self.ledger.apply_once(key, self.id)
        else:
            self.ledger.record_effect(key, self.id)
        return {"agent_id": self.id, "key": key, "applied": applied}

    @skill
    async def count(self, n: int) -> list[int]:
        """The numbers 0 to ``n - 1``: a list for a mapped step to run over."""
        return list(range(n))

    @skill
    async def work_item(self, index: int) -> dict[str, Any]:
        """An item of a mapped step: record its effect (keyed ``plan/step[index]``)."""
        key = effect_key(current_request())
        self.ledger.record_effect(key, self.id)
        return {"agent_id": self.id, "key": key, "index": index}

    @skill
    async def hold(self) -> dict[str, Any]:
        """Say it started (a file in ``$CHAOS_HOLD_DIR``), run until the test's ``go`` file
        is there, then record the effect: work that runs exactly as long as a test needs."""
        marks = Path(os.environ["CHAOS_HOLD_DIR"])
        key = effect_key(current_request())
        (marks / f"started-{self.id}").write_text(key)
        while not (marks / "go").exists():  # noqa: ASYNC110 - another process's file
            await asyncio.sleep(0.02)
        self.ledger.record_effect(key, self.id)
        return {"agent_id": self.id, "key": key}

    @skill
    async def fail(self) -> None:
        """Record the attempt as an effect, then raise: a handler that always fails."""
        self.ledger.record_effect(current_request().message_id, self.id)
        raise RuntimeError("this handler always fails")

    @skill
    async def crash(self) -> None:
        """Record the attempt as an effect, then SIGKILL this process: a poison request."""
        self.ledger.record_effect(current_request().message_id, self.id)
        os.kill(os.getpid(), signal.SIGKILL)


class Booker(Agent):
    """Asks before it books: each run is a row (``run:<request id>``), each booking an effect."""

    name = "booker"
    description = "Books a seat once its caller says yes"

    def __init__(self, *, ledger: Ledger | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ledger = ledger or Ledger.from_env()

    async def on_stop(self) -> None:
        self.ledger.close()

    @skill
    async def book(self, seat: str) -> dict[str, Any]:
        """Ask whether to book ``seat``; book it (the effect) on yes."""
        key = current_request().message_id
        self.ledger.record_effect(f"run:{key}", self.id)
        if not await ask(f"Book seat {seat}?", bool):
            return {"booked": False, "agent_id": self.id}
        self.ledger.record_effect(key, self.id)
        return {"booked": True, "agent_id": self.id}
