"""The demo's work, whatever runs the team: list the files, analyse them, report."""

from __future__ import annotations

import secrets
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import click

from agentbus.leader import Aggregate, Plan, PlanClient, Progress, Subtask

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


def _analysis_plan(paths: list[str], title: str) -> Plan:
    analyses = [
        Subtask(
            id=f"analyze-{n}",
            skill="analyze_file",
            parameters={"path": path},
            critical=False,
            retries=1,
            timeout=60,
        )
        for n, path in enumerate(paths)
    ]
    ids = [subtask.id for subtask in analyses]
    return Plan(
        id=f"analyze-{secrets.token_hex(4)}",
        description=f"analyse {len(paths)} Python files, summarise them, report",
        max_parallel=16,
        subtasks=[
            *analyses,
            Subtask(
                id="summarise",
                skill="digest",
                depends_on=ids,
                inputs={"texts": [f"{i}.docstring" for i in ids]},
                parameters={"sentences": 3, "top": 8},
            ),
            Subtask(
                id="report",
                skill="code_report",
                depends_on=[*ids, "summarise"],
                inputs={"files": ids, "summary": "summarise"},
                parameters={"title": title},
            ),
        ],
    )


def timings(aggregates: list[Aggregate], ready: float, total: float) -> list[str]:
    by_skill: dict[str, list[float]] = defaultdict(list)
    agents: set[str] = set()
    attempts = subtasks = 0
    for aggregate in aggregates:
        agents.update(aggregate.totals.agents_used)
        attempts += aggregate.totals.attempts
        subtasks += aggregate.totals.subtasks
        for outcome in aggregate.subtasks:
            if outcome.duration is not None:
                by_skill[outcome.skill].append(outcome.duration)
    lines = [
        f"team ready in {ready:.2f}s; plans: "
        + ", ".join(
            f"{a.plan_id} {a.status.value} in {a.totals.wall_time:.2f}s" for a in aggregates
        ),
        f"{subtasks} subtasks, {attempts} attempts, on {len(agents)} agents: "
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
    # List the files, analyse them, show the report: the exit status and the plans run.
    progress = _Progress(say)
    listing = await client.run(
        Plan(
            id=f"list-{secrets.token_hex(4)}",
            description="list the Python files",
            subtasks=[Subtask(id="list", skill="list_files", parameters={})],
        ),
        on_progress=progress,
    )
    progress.done()
    if listing.status.value != "completed":
        say(f"listing failed: {listing.subtask('list').error}")
        return 2, []
    paths = [entry["path"] for entry in listing.subtask("list").result]
    if not paths:
        say(f"no Python files under {root}")
        return 1, []
    say(f"{len(paths)} Python files under {root}: analysing")
    analysis = await client.run(
        _analysis_plan(paths, f"Code report: {root.name}"), on_progress=progress, timeout=900
    )
    progress.done()
    report = analysis.subtask("report")
    if report.result is not None:
        say("")
        say(report.result["markdown"])
    failed = [o for o in analysis.subtasks if o.error is not None]
    for outcome in failed[:10]:
        say(f"{outcome.id}: {outcome.status.value}: {(outcome.error or {}).get('message')}")
    return {"completed": 0, "partial": 1}.get(analysis.status.value, 2), [listing, analysis]
