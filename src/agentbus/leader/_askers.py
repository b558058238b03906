"""Where a plan's question stands, found in the leaders' journal: who runs the plan now,
whether it parked, ended, or has the answer already (an answer goes there)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentbus.bus import Journal

__all__ = ["Asker", "find_asker"]


@dataclass(slots=True)
class Asker:
    """Where a plan's question stands, as the journal has it since the question."""

    plan_id: str
    leader: str
    """The leader that runs the plan now: the one that asked, or one that took it over."""
    key: str = ""
    """The plan's key in the journal."""
    subtask_id: str = ""
    began: float | None = None
    """When the plan began (its first record's time), to read it back from."""
    queue: str | None = None
    """The plan's reply queue (None: named after its key, as journals before it had it)."""
    answered: bool = False
    parked: bool = False
    ended: bool = False


async def find_asker(journal: Journal, question_id: str, since: datetime) -> Asker | None:
    """The plan that asked ``question_id`` (read from ``since``, the question's time)."""
    found: Asker | None = None
    key = None
    for entry in await journal.read(since):
        records = entry.get("records", ())
        if found is None:
            for record in records:
                question = record.get("question") if record.get("kind") == "asked" else None
                if question is not None and question.get("question_id") == question_id:
                    key = str(entry.get("plan"))
                    found = Asker(
                        str(question.get("plan_id")),
                        str(question.get("asker")),
                        key=key,
                        subtask_id=str(record.get("subtask")),
                        began=record.get("began"),
                        queue=record.get("queue"),
                    )
            continue
        if entry.get("plan") == key:
            _note(found, question_id, records)
    return found


def _note(found: Asker, question_id: str, records: list[dict[str, Any]]) -> None:
    for record in records:
        kind = record.get("kind")
        if kind == "begun":
            found.leader, found.parked = str(record.get("leader")), False
        elif kind == "parked":
            found.parked = True
        elif kind == "ended":
            found.ended = True
        elif kind == "answered" and record.get("question_id") == question_id:
            found.answered = True
