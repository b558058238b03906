"""What an A2A task follows besides its bus request's replies: the seam, and the leader's plans.

The executor is given a ``Follow``: it says how a call goes on the bus (``prepare``) and
hands on the updates it follows while the request runs (``watching``). ``PlanProgress``
follows the plans the leader service runs: each transition is a status update, each
subtask's partial result a chunk of an artifact of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from a2a.types import a2a_pb2 as a2a

from agentbus._http import PlanWatch
from agentbus.bus import Transport
from agentbus.gateway._parts import BusCall, result_parts
from agentbus.leader import Leader, Progress

__all__ = ["Chunk", "Follow", "PlanProgress", "Unfollowed", "Update"]


@dataclass(frozen=True, slots=True)
class Chunk:
    """One partial result, for the artifact ``artifact_id``."""

    artifact_id: str
    name: str
    parts: list[a2a.Part]


Update = dict[str, Any] | Chunk
"""A task's update: the data of a ``working`` status update, or a partial result."""


class Follow(Protocol):
    """How a task's call goes on the bus, and what it follows while its request runs."""

    def prepare(self, call: BusCall, task_id: str) -> BusCall:
        """Return the call as it goes on the bus for the task ``task_id``."""
        ...

    def watching(
        self, bus: Transport, call: BusCall, update: Callable[[Update], None]
    ) -> contextlib.AbstractContextManager[None]:
        """Hand what ``call``, sent from ``bus``, sets going to ``update`` within the block."""
        ...


class Unfollowed:
    """Follows nothing: a call goes as it is, and its replies are all its updates."""

    def __repr__(self) -> str:
        return "<Unfollowed>"

    def prepare(self, call: BusCall, task_id: str) -> BusCall:
        """Return ``call`` as it is."""
        return call

    def watching(
        self, bus: Transport, call: BusCall, update: Callable[[Update], None]
    ) -> contextlib.AbstractContextManager[None]:
        """Follow nothing."""
        return contextlib.nullcontext()


class PlanProgress:
    """Follows the progress of the plans the ``leader`` service runs (``Leader.plan_of``).

    Args:
        plans: What hands on the ``plan_progress`` events the callers' buses get.
        leader: The leader service.
    """

    def __init__(self, plans: PlanWatch, *, leader: str) -> None:
        self._plans = plans
        self._leader = leader

    def __repr__(self) -> str:
        return f"<PlanProgress leader={self._leader!r}>"

    def prepare(self, call: BusCall, task_id: str) -> BusCall:
        """Return ``call``, its plan given the id ``a2a-<task_id>`` unless it has one."""
        plan = self._plan(call)
        if plan is None or "id" in plan:
            return call
        # A plan needs an id to follow its progress: the task's, unless it has one.
        parameters = {**call.parameters, "plan": {**plan, "id": f"a2a-{task_id}"}}
        return dataclasses.replace(call, parameters=parameters)

    @contextlib.contextmanager
    def watching(
        self, bus: Transport, call: BusCall, update: Callable[[Update], None]
    ) -> Iterator[None]:
        """Hand the plan's progress to ``update`` within the block: nothing if ``call``
        runs no plan."""
        plan = self._plan(call)
        if plan is None:
            yield
            return

        def on_plan(progress: Progress) -> None:
            update({"plan_progress": progress.model_dump(mode="json")})
            if progress.transition == "partial" and progress.detail is not None:
                name = f"{progress.subtask_id}.partial"
                update(Chunk(name, name, result_parts(progress.detail.get("chunk"))))

        with self._plans.watching(bus, str(plan["id"]), on_plan):
            yield

    def _plan(self, call: BusCall) -> dict[str, Any] | None:
        return Leader.plan_of(call.skill, call.parameters) if call.service == self._leader else None
