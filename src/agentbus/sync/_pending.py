"""A plan sent and left running: its id at once, its aggregate when it ends."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Protocol

from agentbus.leader import Aggregate, PlanState

__all__ = ["PendingPlan"]


class _StatusLookup(Protocol):
    def __call__(self, plan_id: str, *, timeout: float = ...) -> PlanState: ...


class PendingPlan:
    """A plan (or a task) that a leader runs while the caller does something else.

    What ``SyncBus.submit_plan`` and ``SyncBus.submit_task`` return, as Celery's
    ``delay()`` returns an ``AsyncResult``: the plan's ``id`` at once, to keep (in a web
    session, a database row) and come back with; ``result`` waits for the aggregate;
    ``status`` asks a leader where the plan is. Any process can ask a leader about the
    plan by its id (``SyncBus.plan_status``); only this one holds the future.
    """

    def __init__(self, plan_id: str, future: Future[Aggregate], status: _StatusLookup) -> None:
        self._id = plan_id
        self._future = future
        self._status = status

    def __repr__(self) -> str:
        if not self._future.done():
            where = "running"
        elif self._future.cancelled():
            where = "cancelled"
        else:
            where = "failed" if self._future.exception() else "ended"
        return f"<PendingPlan {self._id} {where}>"

    @property
    def id(self) -> str:
        """The plan's id: a leader knows the plan by it (``plan_status``)."""
        return self._id

    @property
    def future(self) -> Future[Aggregate]:
        """The aggregate's future, for ``concurrent.futures.wait`` and ``as_completed``."""
        return self._future

    def done(self) -> bool:
        """Whether the aggregate has come (or the run failed): ``result`` returns at once."""
        return self._future.done()

    def result(self, timeout: float | None = None) -> Aggregate:
        """Wait for the plan's aggregate, at most ``timeout`` seconds (None: until it ends).

        Raises:
            TimeoutError: not ended within ``timeout``; the plan runs on, ask again.
            RemoteError: the leader refused the plan (``invalid_parameters``).
            RequestTimeout: no aggregate within the plan's own timeout.
            BusClosed: the client closed before the aggregate came.
        """
        return self._future.result(timeout)

    def status(self, *, timeout: float = 10.0) -> PlanState:
        """Where the plan is, as a leader knows it: running, waiting for answers, or ended.

        Raises:
            RemoteError: no leader knows the plan (``invalid_parameters``): none has
                taken it from its queue yet, or it ended longer ago than leaders keep.
        """
        return self._status(self._id, timeout=timeout)
