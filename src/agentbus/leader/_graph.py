"""The plan's dependency graph: which subtasks may start, which can no longer run, when it ends.

Pure bookkeeping: no bus, no tasks, no clock. The runner asks it what to start, tells it
how subtasks ended, and carries out what it answers (skip these, cancel those).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from agentbus.leader._aggregate import SubtaskStatus
from agentbus.leader._plan import Plan

__all__ = ["PlanGraph", "Skip", "Stop"]


@dataclass(frozen=True, slots=True)
class Skip:
    """A subtask that can no longer run: ``cause``, one of its dependencies, did not succeed."""

    subtask_id: str
    cause: str


@dataclass(frozen=True, slots=True)
class Stop:
    """The plan stops: nothing more starts, and the subtasks still running are cancelled."""

    reason: str
    cancel: tuple[str, ...]


class PlanGraph:
    """Schedules a plan's subtasks over its dependency DAG, ``max_parallel`` at a time.

    A subtask waits for its dependencies, becomes ready when the last one succeeds and
    runs when a slot is free. A failed non-critical subtask rules out its dependents (and
    theirs); a failed critical one stops the plan.
    """

    def __init__(self, plan: Plan) -> None:
        self._dependents = plan.dependents()
        self._optional = frozenset(s.id for s in plan.subtasks if not s.critical)
        self._max_parallel = plan.max_parallel
        # Subtasks not ready yet, with how many dependencies they still wait for.
        self._waiting = {s.id: len(set(s.depends_on)) for s in plan.subtasks if s.depends_on}
        self._ready = deque(s.id for s in plan.subtasks if not s.depends_on)
        self._running: dict[str, None] = {}  # in start order: cancels go out in that order
        self._stopped = False

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else "finished" if self.is_finished else "open"
        return (
            f"<PlanGraph {state} waiting={len(self._waiting)} ready={len(self._ready)} "
            f"running={len(self._running)}>"
        )

    @property
    def is_stopped(self) -> bool:
        """Return whether the plan stopped: nothing more starts."""
        return self._stopped

    @property
    def is_finished(self) -> bool:
        """Return whether nothing runs and nothing more will start."""
        return not self._running and (self._stopped or not self._ready)

    @property
    def running(self) -> list[str]:
        """Return the subtasks started and not settled yet, in start order."""
        return list(self._running)

    def start(self) -> list[str]:
        """Return the ready subtasks to start now, in order, as free slots allow."""
        started: list[str] = []
        while self._ready and len(self._running) < self._max_parallel and not self._stopped:
            subtask_id = self._ready.popleft()
            self._running[subtask_id] = None
            started.append(subtask_id)
        return started

    def settle(self, ended: Iterable[tuple[str, SubtaskStatus]]) -> list[Skip | Stop]:
        """Take in subtasks that ended together, and return what follows, in order.

        All of them leave the running set first: a critical failure among them stops only
        the work still running, and the others are settled as usual after it.
        """
        batch = [(subtask_id, status) for subtask_id, status in ended]
        for subtask_id, _ in batch:
            del self._running[subtask_id]
        effects: list[Skip | Stop] = []
        for subtask_id, status in batch:
            # Skipped here is a condition that did not hold: its dependents still run.
            if status in (SubtaskStatus.SUCCEEDED, SubtaskStatus.SKIPPED):
                self._release(subtask_id)
            elif subtask_id in self._optional:
                effects.extend(self._rule_out(subtask_id))
            elif not self._stopped:
                effects.append(self.stop(f"critical subtask {subtask_id!r} {status.value}"))
        return effects

    def stop(self, reason: str) -> Stop:
        """Stop the plan: nothing more starts; return what is running, to cancel."""
        self._stopped = True
        cancel = tuple(self._running)
        self._running.clear()
        return Stop(reason, cancel)

    def unstarted(self) -> list[str]:
        """Return, in plan order, the subtasks that never started and were never ruled out."""
        ready = set(self._ready)
        return [s for s in self._dependents if s in self._waiting or s in ready]

    def _release(self, succeeded: str) -> None:
        for child in self._dependents[succeeded]:
            left = self._waiting.get(child)
            if left is None:  # ruled out by another dependency's failure
                continue
            self._waiting[child] = left - 1
            # Once the plan stopped, a child stays waiting: it is never started.
            if left == 1 and not self._stopped:
                del self._waiting[child]
                self._ready.append(child)

    def _rule_out(self, failed: str) -> list[Skip]:
        skipped: list[Skip] = []
        stack = list(self._dependents[failed])
        while stack:
            subtask_id = stack.pop()
            if self._waiting.pop(subtask_id, None) is not None:
                skipped.append(Skip(subtask_id, failed))
                stack.extend(self._dependents[subtask_id])
        return skipped
