"""The blocking client: agentbus from code that does not use asyncio."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from functools import partial
from types import TracebackType
from typing import Any, Final, Self, TypeVar

from agentbus._config import Settings
from agentbus._exceptions import BusClosed, ConfigurationError, UsageError
from agentbus._logging import get_logger
from agentbus._metrics import Metrics
from agentbus.bus import BusState, Transport, connect
from agentbus.envelopes import BROADCAST, EventEnvelope, Question, ResponseEnvelope
from agentbus.leader import Aggregate, Plan, PlanClient, PlanState, Progress
from agentbus.sync._inbox import Inbox
from agentbus.sync._pending import PendingPlan
from agentbus.sync._thread import LoopThread

__all__ = ["SyncBus", "connect_sync"]

T = TypeVar("T")

_CLOSE_WITHIN: Final = 30.0  # seconds close() waits for the bus to close and the loop to end
_log = get_logger("agentbus.sync")


class SyncBus:
    """A blocking client of the agent bus, for code that does not use asyncio.

    For a Django or Flask app, a script, a notebook or a worker: each method sends and
    waits, and returns what ``agentbus.Bus`` and ``agentbus.PlanClient`` return (or
    raises their exceptions, in the calling thread). The client keeps one event loop
    in a daemon thread of its own, with one bus on it; a call from any thread runs there
    and waits, so one client serves every thread of a process at once. Open one per
    process (after a fork), and close it at exit, or use it as a context manager::

        with agentbus.SyncBus() as bus:
            reply = bus.request("greeter", "greet", {"who": "ann"}, timeout=10)
            print(reply.result)

    Callbacks (``on_progress``, ``on_question``) run in the calling thread, while it
    waits; the ``submit*`` methods send and return at once, with a future. Closing
    fails the calls still waiting with ``BusClosed``.

    Args:
        url: The broker URL; default ``AGENTBUS_URL``, as ``agentbus.connect``.
        agent_id: This client's id; default one its broker user owns.
        exchange: The topic exchange; default ``AGENTBUS_EXCHANGE``.
        settings: Settings to start from; ``url`` and ``exchange`` override them.
        metrics: Prometheus families to report to (see ``agentbus.Metrics``).
        leader: The service that runs plans (``run_plan``, ``plan_status``).
        transport: Instead of the five above: builds the bus this client opens, called
            on the client's loop (``lambda: MemoryBus(broker)`` in tests).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        agent_id: str | None = None,
        exchange: str | None = None,
        settings: Settings | None = None,
        metrics: Metrics | None = None,
        leader: str = "leader",
        transport: Callable[[], Transport] | None = None,
    ) -> None:
        if transport is not None and any(
            given is not None for given in (url, agent_id, exchange, settings, metrics)
        ):
            raise ConfigurationError("give a transport, or what connects one; not both")
        self._make: Callable[[], Transport] = transport or partial(
            connect, url, agent_id=agent_id, exchange=exchange, settings=settings, metrics=metrics
        )
        self._leader = leader
        self._lock = threading.Lock()
        self._state = BusState.NEW
        self._thread = LoopThread("agentbus-sync")
        self._bus: Transport | None = None
        self._plans: PlanClient | None = None

    def __repr__(self) -> str:
        agent = f" agent_id={self._bus.agent_id!r}" if self._bus is not None else ""
        return f"<SyncBus {self._state.value}{agent} calls={self._thread.calls}>"

    @property
    def state(self) -> BusState:
        """Where the client is in its life: new, open, closing or closed."""
        return self._state

    @property
    def is_open(self) -> bool:
        """Whether calls can be made."""
        return self._state is BusState.OPEN

    @property
    def agent_id(self) -> str | None:
        """This client's id on the bus, once open."""
        return self._bus.agent_id if self._bus is not None else None

    def open(self) -> Self:
        """Start the client's loop and open its bus there; return the client.

        A client whose opening failed may be opened again.

        Raises:
            BrokerUnavailable: the broker cannot be reached.
            UsageError: the client is open already.
            BusClosed: the client was closed.
        """
        with self._lock:
            if self._state is BusState.OPEN:
                raise UsageError(f"{self!r} is open already")
            if self._state is not BusState.NEW:
                raise BusClosed(f"{self!r} cannot be opened again")
            self._thread = LoopThread("agentbus-sync")
            self._thread.start(self._opened)
            self._state = BusState.OPEN
        _log.debug("sync bus opened", agent_id=self.agent_id)
        return self

    def close(self) -> None:
        """Fail the calls still waiting with ``BusClosed``, close the bus, end the loop.

        Safe to call twice, or from several threads: each returns once it is closed. In
        a process forked from the one that opened it, it only marks the client closed:
        the loop and the connection are the parent's.

        Raises:
            UsageError: called from the client's own loop (in ``run_async``).
        """
        with self._lock:
            state = self._state
            if state is BusState.NEW or (state is BusState.OPEN and self._thread.forked):
                self._state = BusState.CLOSED
                return
            if state is BusState.OPEN:
                self._thread.check_caller()
                self._state = BusState.CLOSING
        if state is not BusState.OPEN:
            self._thread.join(_CLOSE_WITHIN)  # another thread closes it
            return
        try:
            self._thread.stop(self._closed, timeout=_CLOSE_WITHIN)
        finally:
            self._state = BusState.CLOSED
            _log.debug("sync bus closed", agent_id=self.agent_id)

    def __enter__(self) -> Self:
        with self._lock:
            opened = self._state is BusState.OPEN
        return self if opened else self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def request(
        self,
        receiver: str,
        action: str,
        parameters: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        metadata: dict[str, Any] | None = None,
        persistent: bool = True,
        on_progress: Callable[[ResponseEnvelope], object] | None = None,
        on_question: Callable[[Question], Any] | None = None,
        answer_within: float | None = None,
        context_id: str | None = None,
    ) -> ResponseEnvelope:
        """Send a request to an instance or service and wait for its response.

        As ``Bus.request``, whose arguments these are; ``on_progress`` and
        ``on_question`` are plain functions, called in this thread. ``on_question``
        returns each question's answer (raising ``QuestionDeclined`` declines it);
        without it, a question raises ``InputRequired``, to ``answer`` later.

        Raises:
            RemoteError: the receiver answered with an error envelope.
            InputRequired: the work asks a question, and ``on_question`` is not given.
            RequestTimeout: no answer within ``timeout`` seconds.
            Unroutable: nobody serves ``receiver`` (``NoInstance``: nobody consumes it).
            BusClosed: the client is not open, or closed while the call waited.
        """
        inbox = Inbox()
        progress = inbox.progress(on_progress) if on_progress else None
        question = inbox.question(on_question) if on_question else None
        return inbox.wait(
            self._submit(
                lambda bus: bus.request(
                    receiver,
                    action,
                    parameters,
                    timeout=timeout,
                    metadata=metadata,
                    on_progress=progress,
                    persistent=persistent,
                    on_question=question,
                    answer_within=answer_within,
                    context_id=context_id,
                )
            )
        )

    def call(
        self,
        receiver: str,
        action: str,
        parameters: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_question: Callable[[Question], Any] | None = None,
        context_id: str | None = None,
    ) -> Any:
        """Send a request and return its result alone (``request(...).result``).

        Raises:
            RemoteError, InputRequired, RequestTimeout, Unroutable, BusClosed: as ``request``.
        """
        reply = self.request(
            receiver,
            action,
            parameters,
            timeout=timeout,
            on_question=on_question,
            context_id=context_id,
        )
        return reply.result

    def submit(
        self,
        receiver: str,
        action: str,
        parameters: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        metadata: dict[str, Any] | None = None,
        persistent: bool = True,
        answer_within: float | None = None,
        context_id: str | None = None,
    ) -> Future[ResponseEnvelope]:
        """Send a request and return at once: the future of its response.

        ``future.result(timeout)`` waits for it (raising what ``request`` raises, and
        ``TimeoutError`` when it has not come within that wait); ``future.cancel()``
        stops waiting for it. A question comes as ``InputRequired``.

        Raises:
            BusClosed: the client is not open.
        """
        return self._submit(
            lambda bus: bus.request(
                receiver,
                action,
                parameters,
                timeout=timeout,
                metadata=metadata,
                persistent=persistent,
                answer_within=answer_within,
                context_id=context_id,
            )
        )

    def answer(
        self,
        question: Question | str,
        value: Any = None,
        *,
        decline: bool = False,
        timeout: float | None = None,
        on_question: Callable[[Question], Any] | None = None,
    ) -> ResponseEnvelope:
        """Answer a question (``InputRequired.question``, or its id) and wait for what
        the work does next: its response, or (without ``on_question``) another question.

        A plan's question (``plan_status(...).questions``) is answered the same way:
        the response says the leader took the answer, and the plan goes on.

        Raises:
            InputRequired: the work asks another question (``on_question`` not given).
            QuestionClosed: the question is not open: unknown, expired, or answered.
            RemoteError, RequestTimeout, Unroutable, BusClosed: as ``request``.
        """
        inbox = Inbox()
        handler = inbox.question(on_question) if on_question else None
        return inbox.wait(
            self._submit(
                lambda bus: bus.answer(
                    question, value, decline=decline, timeout=timeout, on_question=handler
                )
            )
        )

    def emit(
        self,
        event_name: str,
        data: dict[str, Any] | None = None,
        *,
        receiver: str = BROADCAST,
        persistent: bool = True,
        ttl: float | None = None,
        mandatory: bool = False,
    ) -> EventEnvelope:
        """Publish an event, to everyone by default; return the envelope sent (``Bus.emit``).

        Raises:
            Unroutable: ``mandatory`` and nobody receives it.
            BusClosed: the client is not open.
        """
        return self._wait(
            lambda bus: bus.emit(
                event_name,
                data,
                receiver=receiver,
                persistent=persistent,
                ttl=ttl,
                mandatory=mandatory,
            )
        )

    def run_plan(
        self,
        plan: Plan | dict[str, Any],
        *,
        timeout: float = 600.0,
        on_progress: Callable[[Progress], object] | None = None,
        on_question: Callable[[Question], Any] | None = None,
    ) -> Aggregate:
        """Run ``plan`` on a leader and wait for its aggregate (``PlanClient.run``).

        ``on_progress`` gets each subtask transition, ``on_question`` each question a
        step asks (its return is the answer); both run in this thread.

        Raises:
            RemoteError: the leader refused the plan (``invalid_parameters``).
            RequestTimeout: no aggregate within ``timeout`` seconds.
            BusClosed: the client is not open, or closed while the plan ran.
        """
        inbox = Inbox()
        progress = inbox.progress(on_progress) if on_progress else None
        question = inbox.question(on_question) if on_question else None
        return inbox.wait(
            self._submit_plan(
                lambda plans: plans.run(
                    plan, timeout=timeout, on_progress=progress, on_question=question
                )
            )
        )

    def run_task(
        self,
        service: str,
        skill: str,
        parameters: dict[str, Any] | None = None,
        *,
        task_id: str | None = None,
        timeout: float = 600.0,
        on_progress: Callable[[Progress], object] | None = None,
    ) -> Aggregate:
        """Ask ``service`` for ``skill`` as a task (a plan of one subtask, ``task``) and
        wait for its aggregate (``PlanClient.run_task``): ``plan_status(task_id)`` finds
        it meanwhile, from any process.

        Raises:
            RemoteError: the leader refused the task (``invalid_parameters``).
            RequestTimeout: no aggregate within ``timeout`` seconds.
            BusClosed: the client is not open, or closed while the task ran.
        """
        inbox = Inbox()
        progress = inbox.progress(on_progress) if on_progress else None
        return inbox.wait(
            self._submit_plan(
                lambda plans: plans.run_task(
                    service,
                    skill,
                    parameters,
                    task_id=task_id,
                    timeout=timeout,
                    on_progress=progress,
                )
            )
        )

    def submit_plan(self, plan: Plan | dict[str, Any], *, timeout: float = 600.0) -> PendingPlan:
        """Send ``plan`` to a leader and return at once, with its id and future.

        ``plan_status`` finds the plan once a leader has taken it (as ``submit_task``).

        Raises:
            pydantic.ValidationError: ``plan`` is not a plan.
            BusClosed: the client is not open.
        """
        plan = plan if isinstance(plan, Plan) else Plan.model_validate(plan)
        sent = plan
        future = self._submit_plan(lambda plans: plans.run(sent, timeout=timeout))
        return PendingPlan(plan.id, future, self.plan_status)

    def submit_task(
        self,
        service: str,
        skill: str,
        parameters: dict[str, Any] | None = None,
        *,
        task_id: str | None = None,
        timeout: float = 600.0,
    ) -> PendingPlan:
        """Send a task (as ``run_task``) and return at once, with its id and future.

        ``task_id`` names it (default ``task-`` and 12 hex digits): a web view returns
        the id, and the next request looks the task up with ``plan_status``. A leader
        knows the task once it has taken it from its queue, a moment after it is sent
        (later when the leaders are busy): until then ``plan_status`` raises
        ``RemoteError`` (``invalid_parameters``), as for an id no leader knows.

        Raises:
            BusClosed: the client is not open.
        """
        task = task_id if task_id is not None else f"task-{uuid.uuid4().hex[:12]}"
        future = self._submit_plan(
            lambda plans: plans.run_task(service, skill, parameters, task_id=task, timeout=timeout)
        )
        return PendingPlan(task, future, self.plan_status)

    def plan_status(self, plan_id: str, *, timeout: float = 10.0) -> PlanState:
        """Where the plan (or task) ``plan_id`` is: running, waiting for answers (its
        ``questions``), or ended with its aggregate, as a leader knows it.

        Raises:
            RemoteError: no leader knows the plan (``invalid_parameters``).
            BusClosed: the client is not open.
        """
        return Inbox().wait(self._submit_plan(lambda plans: plans.status(plan_id, timeout=timeout)))

    def run_async(self, function: Callable[[Transport], Awaitable[T]]) -> T:
        """Run ``function(bus)`` on the client's loop with its bus, and wait for its result.

        For what the methods above do not cover, without a second connection::

            bus.run_async(lambda b: b.subscribe("broadcast.event.#", on_event))

        What ``function`` sets up (a subscription, a feed) runs on the client's loop
        until the client closes; an event handler runs there too, so it must not block.

        Raises:
            BusClosed: the client is not open, or closed while ``function`` ran.
        """
        return self._wait(function)

    def _submit(self, make: Callable[[Transport], Awaitable[T]]) -> Future[T]:
        with self._lock:
            if self._state is not BusState.OPEN or self._bus is None:
                raise BusClosed(f"{self!r} is not open")
            bus = self._bus
            return self._thread.submit(lambda: make(bus))

    def _submit_plan(self, make: Callable[[PlanClient], Awaitable[T]]) -> Future[T]:
        plans = self._plans
        if plans is None:
            raise BusClosed(f"{self!r} is not open")
        return self._submit(lambda _: make(plans))

    def _wait(self, make: Callable[[Transport], Awaitable[T]]) -> T:
        return Inbox().wait(self._submit(make))

    async def _opened(self) -> None:
        bus = self._make()
        await bus.open()
        self._bus, self._plans = bus, PlanClient(bus, leader=self._leader)

    async def _closed(self) -> None:
        if self._bus is not None:
            await self._bus.aclose()


def connect_sync(
    url: str | None = None,
    *,
    agent_id: str | None = None,
    exchange: str | None = None,
    settings: Settings | None = None,
    metrics: Metrics | None = None,
    leader: str = "leader",
) -> SyncBus:
    """Open a blocking client (``SyncBus``) for ``url`` and return it, open.

    The blocking twin of ``agentbus.connect``, for code without asyncio; unlike it,
    this connects at once. Use the client from any thread; close it at exit, or use it
    in a ``with`` block.

    Raises:
        BrokerUnavailable: the broker cannot be reached.
    """
    client = SyncBus(
        url, agent_id=agent_id, exchange=exchange, settings=settings, metrics=metrics, leader=leader
    )
    return client.open()
