"""The gateway's bounds on tasks: how many run at once, and how long finished ones are kept."""

from __future__ import annotations

import time
from collections import OrderedDict

from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import InvalidRequestError

__all__ = ["TERMINAL", "WAITING", "BoundedTaskStore", "OpenTasks"]

TERMINAL = frozenset(
    {
        a2a.TaskState.TASK_STATE_COMPLETED,
        a2a.TaskState.TASK_STATE_FAILED,
        a2a.TaskState.TASK_STATE_CANCELED,
        a2a.TaskState.TASK_STATE_REJECTED,
    }
)
WAITING = frozenset(
    {a2a.TaskState.TASK_STATE_INPUT_REQUIRED, a2a.TaskState.TASK_STATE_AUTH_REQUIRED}
)
"""The states of a task waiting for a follow-up message (the answer to its question)."""


class OpenTasks:
    """At most ``limit`` tasks open at once; one more is refused at once, not queued."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, bool] = {}  # key -> claimed by a running executor

    def __len__(self) -> int:
        return len(self._open)

    def __repr__(self) -> str:
        return f"<OpenTasks {len(self._open)}/{self.limit}>"

    def reserve(self, key: str) -> None:
        """Take a slot for ``key``.

        Raises:
            InvalidRequestError: every slot is taken (the A2A error names the limit).
        """
        if len(self._open) >= self.limit:
            raise InvalidRequestError(
                message=f"the gateway has {len(self._open)} open tasks, its limit: "
                "retry when some have finished",
                data={"reason": "too_many_open_tasks", "limit": self.limit},
            )
        self._open[key] = False

    def claim(self, key: str) -> None:
        """Mark ``key``'s slot as held by running work (released when the work ends)."""
        if key in self._open:
            self._open[key] = True

    def release_unclaimed(self, key: str) -> None:
        """Give back ``key``'s slot if no work ever started on it."""
        if self._open.get(key) is False:
            del self._open[key]

    def release(self, key: str) -> None:
        """Give back ``key``'s slot."""
        self._open.pop(key, None)


class BoundedTaskStore(InMemoryTaskStore):
    """The SDK's in-memory store, keeping finished tasks ``retention`` seconds, ``size`` at most.

    A task waiting for input is kept ``waiting`` seconds after its last change; running
    ones are never dropped (their number is bounded by ``OpenTasks``).
    """

    def __init__(self, *, size: int, retention: float, waiting: float) -> None:
        super().__init__()
        self._size = size
        self._retention = retention
        self._waiting_for = waiting
        self._finished: OrderedDict[str, tuple[float, ServerCallContext]] = OrderedDict()
        self._waiting: OrderedDict[str, tuple[float, ServerCallContext]] = OrderedDict()
        self._known: set[tuple[str, str]] = set()  # (owner, task id), without reading a copy

    def __len__(self) -> int:
        return len(self._known)

    async def save(self, task: a2a.Task, context: ServerCallContext) -> None:
        await super().save(task, context)
        self._known.add((context.user.user_name, task.id))
        self._waiting.pop(task.id, None)
        if task.status.state in TERMINAL:
            self._finished[task.id] = (time.monotonic(), context)
            self._finished.move_to_end(task.id)
        elif task.status.state in WAITING:
            self._waiting[task.id] = (time.monotonic(), context)
        await self._prune()

    async def get(self, task_id: str, context: ServerCallContext) -> a2a.Task | None:
        await self._prune()
        task: a2a.Task | None = await super().get(task_id, context)
        return task

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        self._known.discard((context.user.user_name, task_id))
        self._finished.pop(task_id, None)
        self._waiting.pop(task_id, None)
        await super().delete(task_id, context)

    async def _prune(self) -> None:
        now = time.monotonic()
        while self._waiting:
            task_id, (changed, context) = next(iter(self._waiting.items()))
            if now - changed <= self._waiting_for:
                break
            await self.delete(task_id, context)
        while self._finished:
            task_id, (finished, context) = next(iter(self._finished.items()))
            if now - finished <= self._retention and len(self._known) <= self._size:
                break
            await self.delete(task_id, context)
