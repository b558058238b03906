"""Gateway processes that share their tasks tell each other of cancels, over the bus.

With a shared task store, ``CancelTask`` may reach a process that does not run the task:
the SDK records the cancel in the store (the task's subscribers, wherever they are, see
it there), and this process then emits ``gateway_task_cancelled`` on the bus. Every
gateway process follows that event; the one running the task, once the store confirms
the cancel, cancels the task's bus request at the agent holding it and ends the task.
"""

from __future__ import annotations

from a2a.server.cluster import VersionedTaskStore
from a2a.server.context import ServerCallContext
from a2a.types import a2a_pb2 as a2a

from agentbus.bus import Bus
from agentbus.envelopes import EventEnvelope
from agentbus.gateway._executor import BusExecutor

__all__ = ["CANCELLED", "PeerCancels"]

CANCELLED = "gateway_task_cancelled"
"""The event a gateway process emits when it has cancelled a task in the shared store."""


class PeerCancels:
    """Tells the other gateway processes of cancels, and acts on theirs.

    Args:
        bus: The gateway's own bus (it emits and follows the event).
        executor: Runs this process's tasks.
        store: The shared task store, which confirms a cancel before it is acted on.
    """

    def __init__(self, bus: Bus, executor: BusExecutor, store: VersionedTaskStore) -> None:
        self._bus = bus
        self._executor = executor
        self._store = store

    def __repr__(self) -> str:
        return f"<PeerCancels {self._bus.agent_id}>"

    async def start(self) -> None:
        """Follow the other processes' cancels."""
        await self._bus.subscribe(f"broadcast.event.{CANCELLED}", self._on_cancelled)

    async def tell(self, task_id: str) -> None:
        """Tell every gateway process that task ``task_id`` was cancelled in the store."""
        await self._bus.emit(CANCELLED, {"task_id": task_id}, persistent=False)

    async def _on_cancelled(self, event: EventEnvelope) -> None:
        task_id = event.payload.event_data.get("task_id")
        if not isinstance(task_id, str):
            return

        async def confirm(context: ServerCallContext) -> bool:
            stored = await self._store.get(task_id, context)
            return stored is not None and stored.task.status.state == _CANCELED

        await self._executor.cancelled_elsewhere(task_id, confirm)


_CANCELED = a2a.TaskState.TASK_STATE_CANCELED
