"""How the executor tells a task's events to the SDK: at once, or once, whole, at its end."""

from __future__ import annotations

from dataclasses import dataclass

from a2a.helpers import new_task
from a2a.server.agent_execution import RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2 as a2a
from google.protobuf.json_format import MessageToDict

__all__ = ["Telling"]


@dataclass(slots=True)
class Telling:
    """How a task's events are told: its start at once, or, to a caller who waits for its
    end (``waited``), with its first update, or as the whole task when it ends.

    A task ``resumed`` by a follow-up message exists already: its turn starts ``working``
    and ends with a status update, whatever the caller waits for.
    """

    context: RequestContext
    queue: EventQueue
    updater: TaskUpdater
    waited: bool
    resumed: bool = False
    told: bool = False

    async def start(self) -> None:
        """Tell the task's start, once: submitted then working (working, to a caller who
        waits: it sees only the end; working, for a task resumed)."""
        if self.told:
            return
        self.told = True
        if self.resumed:
            await self.updater.start_work()
        elif self.waited:
            await self.queue.enqueue_event(self._task(a2a.TaskState.TASK_STATE_WORKING))
        else:
            await self.queue.enqueue_event(self._task(a2a.TaskState.TASK_STATE_SUBMITTED))
            await self.updater.start_work()

    async def end(
        self,
        state: a2a.TaskState,
        message: a2a.Message | None = None,
        artifact: a2a.Artifact | None = None,
    ) -> None:
        """Tell the turn's end: an artifact and the state it ends in (final, or waiting for
        input); if nothing was told yet, one event, the whole task as it ends."""
        if not self.told and not self.resumed:
            self.told = True
            task = self._task(state, message)
            if artifact is not None:
                task.artifacts.append(artifact)
            await self.queue.enqueue_event(task)
            return
        self.told = True
        if artifact is not None:
            await self.updater.add_artifact(
                list(artifact.parts),
                artifact_id=artifact.artifact_id,
                name=artifact.name,
                metadata=MessageToDict(artifact.metadata),
            )
        await self.updater.update_status(state, message=message)

    def _task(self, state: a2a.TaskState, message: a2a.Message | None = None) -> a2a.Task:
        # Its history is the message that made it.
        history = [self.context.message] if self.context.message is not None else []
        task = new_task(self.updater.task_id, self.updater.context_id, state, history=history)
        if message is not None:
            task.status.message.CopyFrom(message)
        if state != a2a.TaskState.TASK_STATE_SUBMITTED:
            task.status.timestamp.GetCurrentTime()  # as the updater stamps a status
        return task
