"""Plain-text tables for the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import orjson

from agentbus.leader import Aggregate, PlanState

__all__ = [
    "agents_table",
    "aggregate_report",
    "plan_state_report",
    "progress_text",
    "table",
]

_CHUNK_SHOWN: Final = 200  # characters of a partial result printed on a progress line


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Render rows as left-aligned columns under a header line."""
    widths = [len(header) for header in headers]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in (headers, *rows)
    ]
    return "\n".join(lines)


def _age(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def agents_table(agents: Sequence[dict[str, Any]]) -> str:
    """Render the registry's ``list_agents`` result as a table (with a SITE column when
    any agent names its site)."""
    if not agents:
        return "no agents known to the registry"
    sites = any(agent.get("site") for agent in agents)
    rows = [
        (
            agent["agent_id"],
            agent["service"],
            *((agent.get("site") or "-",) if sites else ()),
            agent["status"],
            f"{agent['in_flight']}/{agent['capacity']}",
            ",".join(agent["skills"]) or "-",
            _age(float(agent["age"])),
        )
        for agent in agents
    ]
    head = ("ID", "SERVICE", *(("SITE",) if sites else ()), "STATUS", "LOAD", "SKILLS")
    return table((*head, "LAST SEEN"), rows)


def aggregate_report(aggregate: Aggregate) -> str:
    """Render a plan's aggregate: one line per subtask, then the totals."""
    rows = []
    for outcome in aggregate.subtasks:
        detail = ""
        if outcome.error is not None:
            detail = f"{outcome.error.get('code')}: {outcome.error.get('message')}"
        rows.append(
            (
                outcome.id,
                outcome.skill,
                outcome.status.value,
                str(outcome.attempts),
                ",".join(outcome.agents) or "-",
                f"{outcome.duration:.3f}s" if outcome.duration is not None else "-",
                detail[:80],
            )
        )
    totals = aggregate.totals
    summary = (
        f"plan {aggregate.plan_id}: {aggregate.status.value} — {totals.succeeded}/"
        f"{totals.subtasks} succeeded, {totals.failed} failed, {totals.skipped} skipped, "
        f"{totals.cancelled} cancelled; {_count(totals.attempts, 'attempt')} on "
        f"{_count(len(totals.agents_used), 'agent')} in {totals.wall_time:.3f}s"
    )
    if aggregate.error:
        summary += f" ({aggregate.error})"
    header = ("SUBTASK", "SKILL", "STATUS", "TRIES", "AGENTS", "TIME", "ERROR")
    return table(header, rows) + "\n" + summary


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def progress_text(state: str, update: dict[str, Any]) -> str:
    """One line for a skill's ``in_progress`` update: progress, a partial result, a start."""
    if state == "progress":
        fraction = update.get("fraction")
        parts = [f"{fraction:.0%}" if isinstance(fraction, int | float) else None]
        parts.append(update.get("message"))
        return "progress " + " ".join(str(part) for part in parts if part is not None)
    if state == "input_required":
        question = update.get("question") or {}
        return (
            f"asks: {question.get('text')} (agentbus answer {question.get('question_id')} ANSWER)"
        )
    if state == "answered":
        return f"answered by {update.get('by')}" + (" (declined)" if update.get("declined") else "")
    if state == "partial":
        chunk = update.get("chunk")
        shown = chunk if isinstance(chunk, str) else orjson.dumps(chunk).decode()
        if len(shown) > _CHUNK_SHOWN:
            shown = shown[:_CHUNK_SHOWN] + "..."
        return f"partial #{update.get('seq')}: {shown}"
    return state


def plan_state_report(state: PlanState) -> str:
    """Render a plan's state: the aggregate's report once ended, else where each subtask is."""
    if state.aggregate is not None:
        return f"{state.plan_id}: ended on {state.leader}\n" + aggregate_report(state.aggregate)
    rows = [
        (o.id, o.skill, o.status.value, str(o.attempts), ",".join(o.agents) or "-")
        for o in state.subtasks
    ]
    where = "waiting, parked by" if state.state == "waiting" else "running on"
    head = f"{state.plan_id}: {where} {state.leader}, {state.done}/{state.total} done"
    report = head + "\n" + table(("subtask", "skill", "status", "attempts", "agents"), rows)
    for question in state.questions:
        report += (
            f"\n{question.subtask_id} asks: {question.text}\n"
            f"  answer it: agentbus answer {question.question_id} ANSWER"
        )
    return report
