"""The demo's work, whatever runs the team: list the files, analyse them, report."""

from __future__ import annotations

import secrets
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import click

from agentbus.leader import Aggregate, Plan, PlanClient, Progress

__all__ = ["analyse", "timings"]


class _Progress:
    """Live progress: one updating line on a terminal, milestones otherwise."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self._say = say
        self._tty = sys.stderr.isatty()
        self._reported = -1

    def __call__(self, progress: Progress) -> None:
        agent = f" on {progress.agent_id}" if progress.agent_id else ""
        line = (
            f"[{progress.done}/{progress.total}] {progress.subtask_id} {progress.transition}{agent}"
        )
        if progress.transition in ("failed", "retrying", "cancelled"):
            error = (progress.error or {}).get("message", "")
            self._finish_line()
            click.echo(f"  {line}: {error}", err=True)
        elif self._tty:
            click.echo(f"\r\033[K  {line}", nl=False, err=True)
        else:
            decile = progress.done * 10 // max(progress.total, 1)
            if decile != self._reported and progress.transition != "started":
                self._reported = decile
                click.echo(f"  {line}", err=True)

    def _finish_line(self) -> None:
        if self._tty:
            click.echo("", err=True)

    def done(self) -> None:
        self._finish_line()
        self._reported = -1


def _analysis_plan(title: str) -> Plan:
    # One plan: list the files, analyse each (a step mapped over the listing), summarise
    # the docstrings and report; the last two only when there are files.
    some_files = {"!!": {"var": "analyze"}}
    return Plan.model_validate(
        {
            "id": f"analyze-{secrets.token_hex(4)}",
            "description": "list the Python files, analyse each, summarise them, report",
            "subtasks": [
                {"id": "list", "skill": "list_files"},
                {
                    "id": "analyze",
                    "skill": "analyze_file",
                    "depends_on": ["list"],
                    "map": {"over": "list.*.path", "as": "path", "items": "optional"},
                    "retries": 1,
                    "timeout": 60,
                },
                {
                    "id": "summarise",
                    "skill": "digest",
                    "depends_on": ["analyze"],
                    "when": some_files,
                    "inputs": {"texts": "analyze.*.docstring"},
                    "parameters": {"sentences": 3, "top": 8},
                },
                {
                    "id": "report",
                    "skill": "code_report",
                    "depends_on": ["analyze", "summarise"],
                    "when": some_files,
                    "inputs": {"files": "analyze", "summary": "summarise"},
                    "parameters": {"title": title},
                },
            ],
        }
    )


def timings(aggregates: list[Aggregate], ready: float, total: float) -> list[str]:
    by_skill: dict[str, list[float]] = defaultdict(list)
    agents: set[str] = set()
    attempts = subtasks = 0
    for aggregate in aggregates:
        agents.update(aggregate.totals.agents_used)
        attempts += aggregate.totals.attempts
        for outcome in aggregate.subtasks:
            # A mapped step counts as its items.
            subtasks += outcome.items["total"] if outcome.items else 1
            if outcome.duration is not None:
                by_skill[outcome.skill].append(outcome.duration)
    lines = [
        f"team ready in {ready:.2f}s; plans: "
        + ", ".join(
            f"{a.plan_id} {a.status.value} in {a.totals.wall_time:.2f}s" for a in aggregates
        ),
        f"{subtasks} steps and items, {attempts} attempts, on {len(agents)} agents: "
        + ", ".join(sorted(agents)),
    ]
    for skill, durations in sorted(by_skill.items()):
        mean = sum(durations) / len(durations)
        lines.append(f"  {skill:<14} x{len(durations):<4} mean {mean * 1000:8.1f} ms")
    lines.append(f"total {total:.2f}s")
    return lines


async def analyse(
    client: PlanClient, root: Path, say: Callable[[str], None]
) -> tuple[int, list[Aggregate]]:
    # One plan: the files listed, analysed, summarised, reported; the exit status, the plan.
    progress = _Progress(say)
    analysis = await client.run(
        _analysis_plan(f"Code report: {root.name}"), on_progress=progress, timeout=900
    )
    progress.done()
    listing = analysis.subtask("list")
    if listing.error is not None:
        say(f"listing failed: {listing.error}")
        return 2, [analysis]
    analyzed = analysis.subtask("analyze")
    if not analyzed.result:
        say(f"no Python files under {root}")
        return 1, [analysis]
    report = analysis.subtask("report")
    if report.result is not None:
        say("")
        say(report.result["markdown"])
    failed = [o for o in analysis.subtasks if o.error is not None]
    for outcome in failed[:10]:
        say(f"{outcome.id}: {outcome.status.value}: {(outcome.error or {}).get('message')}")
    for failure in (analyzed.items or {}).get("failures", [])[:10]:
        say(f"analyze[{failure['index']}]: {failure['message']}")
    return {"completed": 0, "partial": 1}.get(analysis.status.value, 2), [analysis]
