"""Plans made at run time: a step whose skill plans, its fragment run inside the plan.

A step marked ``fragment`` is tried as any step is; its answer is a fragment
(``{"subtasks": [...], "max_parallel": n}``), validated as a plan is (ids, dependencies
within the fragment, no cycle, conditions, maps) and bounded: at most 1,000 steps, at
most ``MAX_DEPTH`` fragments deep, and under the plan's deadline and budget (its runs share
them). A durable plan journals the fragment before it runs, so a leader taking the plan
over runs it on rather than asking the planner again. The fragment's steps run under ids
``<step>/<fragment step>``; the step's result is the fragment's results, by step id, and
it fails when the fragment does (a critical step of it failed).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from pydantic import ValidationError

from agentbus.envelopes import ErrorCode
from agentbus.leader._aggregate import Aggregate, PlanStatus
from agentbus.leader._attempt import Answered, AttemptResult, Failed, SubtaskError
from agentbus.leader._plan import Fragment, Plan, Subtask
from agentbus.leader._record import SubtaskRecord
from agentbus.leader._takeover import TakeOver

__all__ = ["MAX_DEPTH", "Expander"]

MAX_DEPTH: Final = 3
"""How deep fragments nest: a fragment's step may plan a fragment, down to this depth."""
_FAILURES_KEPT: Final = 20

Attempts = Callable[[Subtask, SubtaskRecord, dict[str, Any]], Awaitable[AttemptResult]]
RunFragment = Callable[[Plan, str], Awaitable[Aggregate]]
"""Runs a fragment as a plan of its own, its ids under the prefix, sharing the plan's
journal, deadline, budget and progress."""


class Expander:
    """Runs the fragment steps of one plan run.

    Args:
        plan: The plan (its id names the fragments' plans).
        attempts: Tries the planner step as any step.
        run_fragment: Runs a fragment inside the plan.
        takeover: A durable plan's journal, and what an earlier leader left of it.
        depth: How many fragments deep this run is (0: the plan itself).
    """

    def __init__(
        self,
        plan: Plan,
        attempts: Attempts,
        run_fragment: RunFragment,
        takeover: TakeOver | None,
        depth: int,
    ) -> None:
        self._plan = plan
        self._attempts = attempts
        self._run_fragment = run_fragment
        self._takeover = takeover
        self._depth = depth

    def __repr__(self) -> str:
        return f"<Expander depth={self._depth}>"

    async def run(
        self, subtask: Subtask, record: SubtaskRecord, parameters: dict[str, Any]
    ) -> AttemptResult:
        """Ask the planner (unless an earlier leader did), run its fragment, and return the
        fragment's results as the step's."""
        if self._depth >= MAX_DEPTH:
            return _refused(f"fragments nest at most {MAX_DEPTH} deep")
        made = None if self._takeover is None else self._takeover.expanded(record.id)
        if made is None:
            planned = await self._attempts(subtask, record, parameters)
            if not isinstance(planned, Answered):
                return planned
            made = planned.result
        try:
            fragment = Fragment.model_validate(made)
            plan = self._plan.fragment(record.id, fragment)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            return _refused(f"the planner's fragment is not valid: {first['msg']}")
        if self._takeover is not None:
            await self._takeover.expand(record.id, fragment.model_dump(mode="json"))
        prefix = f"{record.id}/"  # the fragment's step ids, under the planner step's own
        aggregate = await self._run_fragment(plan, prefix)
        record.items = _summary(aggregate)
        if aggregate.status is PlanStatus.FAILED:
            reason = aggregate.error or "a step of it failed"
            return Failed(
                SubtaskError(ErrorCode.PROCESSING_FAILED.value, f"its fragment: {reason}")
            )
        results = {o.id.removeprefix(prefix): o.result for o in aggregate.subtasks}
        return Answered(results, "")


def _summary(aggregate: Aggregate) -> dict[str, Any]:
    totals = aggregate.totals
    counts = {"succeeded": totals.succeeded, "failed": totals.failed}
    counts |= {"skipped": totals.skipped, "cancelled": totals.cancelled}
    failures = [
        {"id": outcome.id} | (outcome.error or {})
        for outcome in aggregate.subtasks
        if outcome.error is not None
    ][:_FAILURES_KEPT]
    shown = {status: count for status, count in counts.items() if count}
    return {"total": totals.subtasks, **shown, "failures": failures}


def _refused(message: str) -> Failed:
    return Failed(SubtaskError(ErrorCode.INVALID_PARAMETERS.value, message, final=True))
