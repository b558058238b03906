"""A mapped step: run once per item of an earlier result, results gathered in order.

Each item is tried as a step of its own would be (attempts, retries, fail-over, questions)
under its own id, ``<step>[<index>]``: its requests, its journal records and its progress
carry it, so a leader taking the plan over runs no finished item again. At most
``map.concurrency`` items run at once. An item that fails for good fails the step, its
other items cancelled (``items: critical``), or leaves a null in the results and the
step goes on (``items: optional``). An empty list is a step that succeeds with ``[]``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from agentbus.envelopes import ErrorCode
from agentbus.leader._aggregate import SubtaskStatus
from agentbus.leader._attempt import Answered, AttemptResult, Failed, SubtaskError
from agentbus.leader._plan import MapSpec, Subtask, resolve_input
from agentbus.leader._record import SubtaskRecord
from agentbus.leader._sender import Emit
from agentbus.leader._takeover import TakeOver

Attempts = Callable[[Subtask, SubtaskRecord, dict[str, Any]], Awaitable[AttemptResult]]
"""Tries a step (or an item) to its end: ``PlanRunner.attempts``."""

__all__ = ["Mapper", "item_id"]

_FAILURES_KEPT: Final = 20  # per mapped step, in its outcome's ``items``


def item_id(step_id: str, index: int) -> str:
    """The id of item ``index`` of the mapped step ``step_id``."""
    return f"{step_id}[{index}]"


class Mapper:
    """Runs the mapped steps of one plan run.

    Args:
        attempts: Tries each item as the runner tries a step.
        results: The results so far, by step id (the items are resolved from them).
        takeover: A durable plan's journal, and what an earlier leader left of it.
        emit: Reports each item's transitions, under its own id.
        spend: Counts what each item's answer used against the plan's budget.
    """

    def __init__(
        self,
        attempts: Attempts,
        results: dict[str, Any],
        takeover: TakeOver | None,
        emit: Emit,
        spend: Callable[[dict[str, float]], None],
    ) -> None:
        self._attempts = attempts
        self._results = results
        self._takeover = takeover
        self._emit = emit
        self._spend = spend

    def __repr__(self) -> str:
        return "<Mapper>"

    async def run(
        self, subtask: Subtask, record: SubtaskRecord, parameters: dict[str, Any]
    ) -> AttemptResult:
        """Run ``subtask`` over its items; its result is theirs, in order."""
        spec = subtask.map
        assert spec is not None
        items = self._items(spec)
        if isinstance(items, SubtaskError):
            return Failed(items)
        if len(items) > spec.limit:
            message = f"{len(items)} items to map over, over the map's limit of {spec.limit}"
            return Failed(SubtaskError(ErrorCode.INVALID_PARAMETERS.value, message, final=True))
        mapping = _Mapping(subtask, record.id, spec, len(items))
        semaphore = asyncio.Semaphore(spec.concurrency)
        tasks = [
            asyncio.create_task(self._item(mapping, index, item, parameters, semaphore))
            for index, item in enumerate(items)
        ]
        try:
            for done in asyncio.as_completed(tasks):
                failed = await done
                if failed is not None and spec.items == "critical":
                    return Failed(failed)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            record.items = mapping.summary()
            record.usage = mapping.usage or None
            record.attempts = mapping.attempts
            record.agents = list(mapping.agents) or None
        return Answered(mapping.results, mapping.agent or "")

    def _items(self, spec: MapSpec) -> list[Any] | SubtaskError:
        try:
            items = resolve_input(spec.over, self._results)
        except KeyError as exc:
            return SubtaskError.missing_input(exc.args[0])
        if spec.flatten and isinstance(items, list):
            if not all(isinstance(part, list) for part in items):
                return _not_a_list(spec.over, "a list of lists")
            items = [item for part in items for item in part]
        if not isinstance(items, list):
            return _not_a_list(spec.over, "a list")
        return items

    async def _item(
        self,
        mapping: _Mapping,
        index: int,
        item: Any,
        parameters: dict[str, Any],
        semaphore: asyncio.Semaphore,
    ) -> SubtaskError | None:
        # One item, to its end; its error, when it failed for good.
        record = SubtaskRecord(item_id(mapping.step_id, index), mapping.subtask.skill)
        if self._takeover is not None and self._takeover.settled_before(record):
            self._spend(record.usage or {})  # another leader saw it end: not run again
            return mapping.settled(index, record)
        async with semaphore:
            record.status = SubtaskStatus.RUNNING
            record.started = time.time()
            self._emit(record, "started")
            given = parameters | {mapping.spec.as_: item}
            result = await self._attempts(mapping.subtask, record, given)
        if isinstance(result, Answered):
            record.status, record.result = SubtaskStatus.SUCCEEDED, result.result
            record.usage = result.usage
            record.add_agent(result.agent_id)
            self._spend(result.usage or {})
        elif isinstance(result, Failed):
            record.status, record.error = result.error.status, result.error
        record.ended = time.time()
        if self._takeover is not None:
            self._takeover.settled(record)
        agent = result.agent_id if isinstance(result, Answered) else None
        self._emit(record, record.status.value, agent_id=agent, error=record.error)
        return mapping.settled(index, record)


class _Mapping:
    """One mapped step's run: its items' results in order, and what became of them."""

    def __init__(self, subtask: Subtask, step_id: str, spec: MapSpec, total: int) -> None:
        self.subtask = subtask
        self.step_id = step_id
        self.spec = spec
        self.results: list[Any] = [None] * total
        self.usage: dict[str, float] = {}
        self.agent: str | None = None
        self.agents: dict[str, None] = {}  # every instance that worked on an item, in order
        self.attempts = 0
        self._counts = dict.fromkeys(("succeeded", "failed", "cancelled", "skipped"), 0)
        self._failures: list[dict[str, Any]] = []

    def settled(self, index: int, record: SubtaskRecord) -> SubtaskError | None:
        """Count an item that ended; return its error if it failed."""
        self._counts[record.status.value] = self._counts.get(record.status.value, 0) + 1
        self.attempts += record.attempts
        self.agents.update(dict.fromkeys(record.agents or ()))
        for unit, amount in (record.usage or {}).items():
            self.usage[unit] = self.usage.get(unit, 0.0) + amount
        if record.status is SubtaskStatus.SUCCEEDED:
            self.results[index] = record.result
            if self.agent is None and record.agents:
                self.agent = record.agents[0]
            return None
        error = record.error or SubtaskError.cancelled("the item did not end")
        if len(self._failures) < _FAILURES_KEPT:
            self._failures.append({"index": index} | error.to_wire())
        message = f"item {index} of {self.step_id!r}: {error.message}"
        return SubtaskError(error.code, message, error.details)

    def summary(self) -> dict[str, Any]:
        """The items' counts by how they ended, and the first failures."""
        counts = {status: count for status, count in self._counts.items() if count}
        return {"total": len(self.results), **counts, "failures": self._failures}


def _not_a_list(reference: str, wanted: str) -> SubtaskError:
    message = f"map over {reference!r}: its value is not {wanted}"
    return SubtaskError(ErrorCode.INVALID_PARAMETERS.value, message, final=True)
