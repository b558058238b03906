"""The SDK's request handler with the gateway's admission: a message fits a skill and a slot."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable

from a2a.server.agent_execution import SimpleRequestContextBuilder
from a2a.server.cluster import LegacyTaskStoreAdapter, TaskEventStream, VersionedTaskStore
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.id_generator import IDGenerator
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import TaskStore
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError

from agentbus._exceptions import AgentBusError
from agentbus.agents import AgentCard
from agentbus.envelopes import Question
from agentbus.gateway._executor import CALL_KEY, WAITED_KEY, BusExecutor
from agentbus.gateway._parts import bus_call
from agentbus.gateway._push import Pushes
from agentbus.gateway._questions import question_of
from agentbus.gateway._tasks import TERMINAL, WAITING, OpenTasks

__all__ = ["GatewayHandler"]

_PLAN_QUESTION = "agentbus.plan_question"
"""Call-context state key: the plan's question a follow-up message answers."""
_PARKED_FOR = 30.0
"""Seconds the SDK keeps a task waiting for input in memory; a follow-up after that
takes it from the store (a question may wait days: it holds nothing meanwhile)."""


class GatewayHandler(DefaultRequestHandler):
    """Handles one service's A2A requests; a message becomes a ``BusCall`` before any task.

    A message that fits no skill, or comes when every task slot is taken, gets the A2A
    error at once: no task is created and nothing is sent on the bus. A message on a task
    (``taskId``) is taken only while the task waits for input: it is the answer. With a shared
    ``store`` and its ``events``, a cancel is told to the other gateway processes
    (``cancelled``), one of which may run the task. With ``pushes``, callers register
    webhooks (push notifications). A message on a task waiting on a plan's question goes
    to the leader as its answer, and its caller follows the task from there.
    """

    def __init__(
        self,
        service: str,
        card: Callable[[], AgentCard | None],
        a2a_card: a2a.AgentCard,
        *,
        executor: BusExecutor,
        store: TaskStore | VersionedTaskStore,
        open_tasks: OpenTasks,
        events: TaskEventStream | None = None,
        cancelled: Callable[[str], Awaitable[None]] | None = None,
        task_ids: IDGenerator | None = None,
        pushes: Pushes | None = None,
    ) -> None:
        super().__init__(
            agent_executor=executor,
            task_store=store,
            agent_card=a2a_card,
            event_stream=events,
            push_config_store=pushes.configs if pushes is not None else None,
            push_sender=pushes.sender if pushes is not None else None,
            push_url_validator=pushes.screen if pushes is not None else None,
            request_context_builder=SimpleRequestContextBuilder(task_id_generator=task_ids),
            interrupted_task_timeout=_PARKED_FOR,
        )
        self.service = service
        self._tasks = (
            store if isinstance(store, VersionedTaskStore) else LegacyTaskStoreAdapter(store)
        )
        self._bus_executor = executor
        self._card = card
        self._open = open_tasks
        self._cancelled = cancelled

    def __repr__(self) -> str:
        return f"<GatewayHandler {self.service}>"

    async def _admit(self, params: a2a.SendMessageRequest, context: ServerCallContext) -> str:
        if params.message.task_id:
            task = await self._waiting(params.message.task_id, context)
            # The SDK would give a follow-up without one a new context: it goes on in its
            # task's (when the task is not held in memory here, the SDK's own check fails).
            params.message.context_id = params.message.context_id or task.context_id
            question = question_of(task)
            if question is not None and question.plan_id is not None:
                context.state[_PLAN_QUESTION] = question
        else:
            card = self._card()
            if card is None:
                raise InvalidParamsError(
                    message=f"the agent {self.service!r} is not on the bus now"
                )
            context.state[CALL_KEY] = bus_call(card, params.message)
        key = params.message.message_id
        self._open.reserve(key)
        return key

    async def _waiting(self, task_id: str, context: ServerCallContext) -> a2a.Task:
        # A follow-up message is the answer to the question its task waits on.
        stored = await self._tasks.get(task_id, context)
        if stored is None:
            raise TaskNotFoundError
        state = stored.task.status.state
        if state not in WAITING:
            raise UnsupportedOperationError(
                message=f"the task is {a2a.TaskState.Name(state)}: a message on a task "
                "answers its question, and it asks none now (a new request: a message "
                "without taskId)"
            )
        return stored.task

    async def on_message_send(
        self, params: a2a.SendMessageRequest, context: ServerCallContext
    ) -> a2a.Message | a2a.Task:
        key = await self._admit(params, context)
        # The caller waits for the end: its task starts as working, one event fewer.
        context.state[WAITED_KEY] = not params.configuration.return_immediately
        try:
            question: Question | None = context.state.get(_PLAN_QUESTION)
            if question is not None:
                return await self._answered_plan(params, context, question)
            result: a2a.Message | a2a.Task = await super().on_message_send(params, context)
            return result
        finally:
            self._open.release_unclaimed(key)

    async def _answered_plan(
        self, params: a2a.SendMessageRequest, context: ServerCallContext, question: Question
    ) -> a2a.Task:
        # The task once the answer is taken: at its end or next question, or as it is.
        async with contextlib.aclosing(self._answer_plan(params, context, question)) as told:
            async for _ in told:
                pass
        task: a2a.Task | None = await self.on_get_task(
            a2a.GetTaskRequest(id=params.message.task_id), context
        )
        if task is None:
            raise TaskNotFoundError
        return task

    async def _answer_plan(
        self, params: a2a.SendMessageRequest, context: ServerCallContext, question: Question
    ) -> AsyncGenerator[Event, None]:
        """Give the plan's question its answer, and yield the task's events from then on,
        to its end or its next question (none to a caller who returns at once).

        Not a turn of the SDK's: the turn that asked still runs the plan (the SDK would
        queue this message behind it); the answer goes to the leader from here.
        """
        task_id = params.message.task_id
        events = self.on_subscribe_to_task(a2a.SubscribeToTaskRequest(id=task_id), context)
        async with contextlib.aclosing(events):
            await anext(events)  # the task as it is: followed from before the answer goes
            try:
                await self._bus_executor.answer_plan(
                    question, params.message, context.user.user_name
                )
            except AgentBusError as exc:
                raise InvalidParamsError(message=f"the answer was not taken: {exc}") from exc
            if params.configuration.return_immediately:
                return
            async for event in events:
                yield event
                if _turn_over(event, question):
                    return

    async def on_cancel_task(
        self, params: a2a.CancelTaskRequest, context: ServerCallContext
    ) -> a2a.Task | None:
        stored = await self._tasks.get(params.id, context)
        task: a2a.Task | None = await super().on_cancel_task(params, context)
        if self._cancelled is not None:
            await self._cancelled(params.id)  # the process running it may be another
        asked = question_of(stored.task) if stored is not None else None
        if asked is not None and asked.plan_id is None:  # a plan's: the plan is cancelled
            self._bus_executor.decline(asked, context.user.user_name)
        return task

    async def on_message_send_stream(
        self, params: a2a.SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        key = await self._admit(params, context)
        try:
            question: Question | None = context.state.get(_PLAN_QUESTION)
            if question is None:
                events = super().on_message_send_stream(params, context)
            else:
                events = self._answer_plan(params, context, question)
            # The stream closes once the task ends or waits for input (A2A §3.1.2): the
            # SDK's would go on while a plan's turn runs on after its question.
            async with contextlib.aclosing(events):
                async for event in events:
                    yield event
                    if _turn_over(event, question):
                        return
        finally:
            self._open.release_unclaimed(key)


def _turn_over(event: Event, answered: Question | None) -> bool:
    # The task ended, or waits on a question (another than the one just ``answered``).
    if not isinstance(event, a2a.Task | a2a.TaskStatusUpdateEvent):
        return False
    state = event.status.state
    if state in TERMINAL:
        return True
    if state not in WAITING:
        return False
    waiting_on = question_of(a2a.Task(status=event.status))
    return answered is None or waiting_on is None or waiting_on.question_id != answered.question_id
