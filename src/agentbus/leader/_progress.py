"""A plan's progress: its transitions, handed to a sink in order, a batch at a time."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, Final

from agentbus._logging import get_logger
from agentbus.envelopes import is_artifact_ref
from agentbus.leader._aggregate import Progress
from agentbus.leader._attempt import SubtaskError
from agentbus.leader._record import SubtaskRecord

__all__ = ["ProgressSink", "ProgressStream"]

ProgressSink = Callable[[list[Progress]], Awaitable[None]]
"""Receives the transitions of a plan, in order, a batch at a time."""

_INTERVAL: Final = 0.1
_BATCH: Final = 256
_ARTIFACTS_TOLD: Final = 20  # references a succeeded transition names at most

_log = get_logger("agentbus.leader")


class ProgressStream:
    """Collects a plan's transitions and hands them to the sink off the scheduler's path.

    One batch per interval or per full batch; on leaving the ``async with`` block, the
    last batch goes out before the block ends.
    """

    def __init__(
        self,
        sink: ProgressSink | None,
        *,
        plan_id: str,
        total: int,
    ) -> None:
        self._sink = sink
        self._plan_id = plan_id
        self._total = total
        self._pending: list[Progress] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._publisher: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ProgressStream:
        if self._sink is not None:
            self._publisher = asyncio.create_task(self._publish(self._sink))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._closing = True
        self._wake.set()
        if self._publisher is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._publisher

    def emit(
        self,
        record: SubtaskRecord,
        transition: str,
        *,
        done: int,
        agent_id: str | None = None,
        error: SubtaskError | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Queue one transition of a subtask."""
        if self._sink is None:
            return
        if transition == "succeeded" and detail is None:
            detail = _artifacts(record.result)
        # One validation of a plain dict: cheaper than model_construct's Python loop.
        self._pending.append(
            Progress.model_validate(
                {
                    "plan_id": self._plan_id,
                    "subtask_id": record.id,
                    "skill": record.skill,
                    "transition": transition,
                    "attempt": record.attempts,
                    "agent_id": agent_id,
                    "error": None if error is None else error.to_wire(),
                    "detail": detail,
                    "done": done,
                    "total": self._total,
                }
            )
        )
        if len(self._pending) >= _BATCH:
            self._wake.set()

    async def _publish(self, sink: ProgressSink) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_INTERVAL):
                    await self._wake.wait()
            self._wake.clear()
            closing = self._closing
            batch, self._pending = self._pending, []
            if batch:
                try:
                    await sink(batch)
                except Exception:
                    _log.exception(
                        "progress not sent", plan_id=self._plan_id, transitions=len(batch)
                    )
            if closing and not self._pending:
                return


def _artifacts(result: Any) -> dict[str, Any] | None:
    """``{"artifacts": [...]}``: the references a result is, holds in a list, or holds as a
    field (no deeper: this runs for every step), for those who watch the plan."""
    found: Iterable[Any]
    if isinstance(result, dict):
        found = [result] if is_artifact_ref(result) else result.values()
    elif isinstance(result, list):
        found = result
    else:
        return None
    refs = [value for value in itertools.islice(found, _ARTIFACTS_TOLD) if is_artifact_ref(value)]
    return {"artifacts": refs} if refs else None
