"""Run one plan: DAG scheduling, retries with backoff, failover, cancel, aggregation."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import structlog

from agentbus._exceptions import AgentBusError, RemoteError
from agentbus.agents._agent import NOTIFY_START
from agentbus.agents.leader._aggregate import (
    Aggregate,
    PlanStatus,
    Progress,
    SubtaskOutcome,
    SubtaskStatus,
    Totals,
)
from agentbus.agents.leader._directory import NoCapableAgent, SkillDirectory
from agentbus.agents.leader._plan import Plan, Subtask, resolve_input
from agentbus.bus import Transport
from agentbus.envelopes import (
    BROADCAST,
    ErrorCode,
    Metadata,
    RequestEnvelope,
    RequestPayload,
    ResponseEnvelope,
    utcnow,
)

__all__ = ["PlanRunner", "ProgressSink"]

ProgressSink = Callable[[list[Progress]], Awaitable[None]]
"""Receives the transitions of a plan, in order, a batch at a time."""

_PROGRESS_INTERVAL: Final = 0.1
_PROGRESS_BATCH: Final = 256

# Errors that another try cannot mend.
_FINAL_CODES: Final = frozenset(
    {
        ErrorCode.INVALID_PARAMETERS,
        ErrorCode.UNKNOWN_ACTION,
        ErrorCode.NO_CAPABLE_AGENT,
        ErrorCode.UNAUTHORIZED,
        ErrorCode.PAYLOAD_TOO_LARGE,
        ErrorCode.INVALID_ENVELOPE,
        ErrorCode.UNSUPPORTED_VERSION,
    }
)
_TERMINAL: Final = frozenset(
    {SubtaskStatus.SUCCEEDED, SubtaskStatus.FAILED, SubtaskStatus.SKIPPED, SubtaskStatus.CANCELLED}
)

_log = structlog.get_logger("agentbus.leader")


# Every field of an outcome is given when the aggregate is built: one shared set for all.
_OUTCOME_FIELDS: Final = set(SubtaskOutcome.model_fields)


@dataclass(slots=True)
class _State:
    """A subtask's state during the run; the pydantic ``SubtaskOutcome`` comes at the end.

    Times are ``time.time()`` floats: a third of a datetime's memory, per subtask.
    """

    id: str
    skill: str
    status: SubtaskStatus = SubtaskStatus.PENDING
    result: Any = None
    error: dict[str, Any] | None = None
    attempts: int = 0
    agents: list[str] | None = None
    started: float | None = None
    ended: float | None = None

    def add_agent(self, agent_id: str) -> None:
        if self.agents is None:
            self.agents = [agent_id]
        elif agent_id not in self.agents:
            self.agents.append(agent_id)

    def outcome(self) -> SubtaskOutcome:
        # Built by the runner from known-valid values: no validation needed.
        started = _datetime(self.started)
        ended = _datetime(self.ended)
        duration = None
        if self.started is not None and self.ended is not None:
            duration = round(self.ended - self.started, 6)
        return SubtaskOutcome.model_construct(
            _fields_set=_OUTCOME_FIELDS,
            id=self.id,
            skill=self.skill,
            status=self.status,
            result=self.result,
            error=self.error,
            attempts=self.attempts,
            agents=self.agents or [],
            started_at=started,
            ended_at=ended,
            duration=duration,
        )


class _Attempt:
    """One request in flight for a subtask: who holds it, and whether they vanished."""

    __slots__ = ("holder", "message_id", "offline", "task")

    def __init__(self, message_id: str, task: asyncio.Task[Any] | None) -> None:
        self.message_id = message_id
        self.holder: str | None = None
        self.offline = False
        self.task = task


class PlanRunner:
    """Runs one validated plan on a transport and returns its aggregate."""

    def __init__(
        self,
        bus: Transport,
        plan: Plan,
        *,
        directory: SkillDirectory,
        progress: ProgressSink | None = None,
        retry_base: float = 0.2,
        retry_cap: float = 5.0,
        rng: random.Random | None = None,
    ) -> None:
        self.plan = plan
        self._bus = bus
        self._directory = directory
        self._sink = progress
        self._retry_base = retry_base
        self._retry_cap = retry_cap
        self._rng = rng or random.Random()
        self._by_id = {subtask.id: subtask for subtask in plan.subtasks}
        self._states = {s.id: _State(s.id, s.skill) for s in plan.subtasks}
        self._results: dict[str, Any] = {}
        self._attempts: dict[str, _Attempt] = {}
        self._held_by: dict[str, set[str]] = {}
        self._deadline: datetime | None = None
        self._done = 0
        self._progress: list[Progress] = []
        self._progress_wake = asyncio.Event()
        self._finished = False
        self._log = _log.bind(plan_id=plan.id)

    def agent_offline(self, agent_id: str) -> None:
        """Move on at once from the work an agent reported offline was holding."""
        self._directory.forget(agent_id)
        for message_id in self._held_by.pop(agent_id, set()):
            attempt = self._attempts.get(message_id)
            if attempt is not None and not attempt.offline and attempt.task is not None:
                # The attempt's task waits on the reply: cancelled, it sees ``offline`` and
                # moves on. (A reply already in and not yet taken is lost with it, as is
                # one still on its way: the subtask is tried again.)
                attempt.offline = True
                attempt.task.cancel()

    async def run(self) -> Aggregate:
        """Run the plan to its end and return the aggregate."""
        started_at, started = utcnow(), time.monotonic()
        self._deadline = self.plan.deadline_at(started_at)
        publisher = asyncio.create_task(self._publish_progress())
        error: str | None = None
        try:
            error = await self._schedule()
        finally:
            self._finished = True
            self._progress_wake.set()
            with contextlib.suppress(asyncio.CancelledError):
                await publisher
        return self._aggregate(started_at, time.monotonic() - started, error)

    async def _schedule(self) -> str | None:
        plan = self.plan
        dependents = plan.dependents()
        waiting = {s.id: len(set(s.depends_on)) for s in plan.subtasks}
        ready = deque(s.id for s in plan.subtasks if not s.depends_on)
        running: dict[asyncio.Task[None], str] = {}
        # Finished tasks arrive here: no scan over everything running at each completion.
        finished: asyncio.Queue[asyncio.Task[None]] = asyncio.Queue()
        stopped: str | None = None
        try:
            while ready or running:
                while ready and len(running) < plan.max_parallel and stopped is None:
                    subtask = self._by_id[ready.popleft()]
                    task = asyncio.create_task(self._execute(subtask))
                    task.add_done_callback(finished.put_nowait)
                    running[task] = subtask.id
                if not running:
                    break
                try:
                    async with asyncio.timeout(self._seconds_left()):
                        done = [await finished.get()]
                except TimeoutError:  # the plan's deadline passed with work still running
                    stopped = "the plan's deadline passed"
                    await self._cancel(running, reason=stopped)
                    running.clear()
                    break
                while not finished.empty():
                    done.append(finished.get_nowait())
                # Take every finished task out first: a critical failure below clears
                # ``running``, and the others that finished with it must still be handled.
                ended = [running.pop(task) for task in done if task in running]
                for subtask_id in ended:
                    outcome = self._states[subtask_id]
                    if outcome.status is SubtaskStatus.SUCCEEDED:
                        for child in dependents[subtask_id]:
                            waiting[child] -= 1
                            if waiting[child] == 0 and stopped is None:
                                ready.append(child)
                    elif self._by_id[subtask_id].critical:
                        if stopped is None:
                            stopped = f"critical subtask {subtask_id!r} {outcome.status.value}"
                            await self._cancel(running, reason=stopped)
                            running.clear()
                    else:
                        await self._skip_dependents(subtask_id, dependents)
        except asyncio.CancelledError:
            await self._cancel(running, reason="the leader is stopping")
            raise
        for outcome in self._states.values():
            if outcome.status not in _TERMINAL:
                await self._finish(
                    outcome,
                    SubtaskStatus.SKIPPED,
                    error={"code": "skipped", "message": stopped or "a dependency did not succeed"},
                )
        return stopped

    async def _skip_dependents(self, failed: str, dependents: dict[str, list[str]]) -> None:
        stack = list(dependents[failed])
        while stack:
            subtask_id = stack.pop()
            outcome = self._states[subtask_id]
            if outcome.status is SubtaskStatus.PENDING:
                message = f"dependency {failed!r} did not succeed"
                await self._finish(
                    outcome, SubtaskStatus.SKIPPED, error={"code": "skipped", "message": message}
                )
                stack.extend(dependents[subtask_id])

    async def _cancel(self, running: dict[asyncio.Task[None], str], *, reason: str) -> None:
        for task in running:
            task.cancel()
        # Each cancelled attempt sends its own cancel request before it ends.
        await asyncio.gather(*running, return_exceptions=True)
        for subtask_id in running.values():
            outcome = self._states[subtask_id]
            if outcome.status not in _TERMINAL:
                await self._finish(
                    outcome,
                    SubtaskStatus.CANCELLED,
                    error={"code": ErrorCode.CANCELLED.value, "message": reason},
                )

    async def _send_cancel(self, attempt: _Attempt) -> None:
        # To the instance holding the work when known, else to everyone: whoever has it stops.
        receiver = attempt.holder or BROADCAST
        cancel = RequestEnvelope.model_construct(
            sender_id=self._bus.agent_id,
            receiver_id=receiver,
            payload=RequestPayload.model_construct(
                action="cancel", parameters={"message_id": attempt.message_id}
            ),
        )
        try:
            await self._bus.publish(cancel, persistent=False, mandatory=False, timeout=5)
        except AgentBusError as exc:
            self._log.info("cancel not sent", error=str(exc))

    def _seconds_left(self) -> float | None:
        if self._deadline is None:
            return None
        return max((self._deadline - utcnow()).total_seconds(), 0.0)

    async def _execute(self, subtask: Subtask) -> None:
        outcome = self._states[subtask.id]
        try:
            parameters = {
                **subtask.parameters,
                **{name: resolve_input(ref, self._results) for name, ref in subtask.inputs.items()},
            }
        except KeyError as exc:
            message = f"input {exc.args[0]!r} is not in the dependency's result"
            missing = {"code": ErrorCode.INVALID_PARAMETERS.value, "message": message}
            await self._finish(outcome, SubtaskStatus.FAILED, error=missing)
            return
        outcome.status = SubtaskStatus.RUNNING
        outcome.started = time.time()
        self._emit_nowait(outcome, "started")
        tried: set[str] = set()
        while True:
            outcome.attempts += 1
            reply, error, offline = await self._attempt(subtask, parameters, outcome, tried)
            if reply is not None:
                self._results[subtask.id] = outcome.result = reply.payload.result
                outcome.add_agent(reply.sender_id)
                await self._finish(outcome, SubtaskStatus.SUCCEEDED)
                return
            assert error is not None
            final = error.get("code") in _FINAL_CODES or outcome.attempts > subtask.retries
            if final or self._seconds_left() == 0.0:
                status = (
                    SubtaskStatus.CANCELLED
                    if error.get("code") == ErrorCode.CANCELLED
                    else SubtaskStatus.FAILED
                )
                await self._finish(outcome, status, error=error)
                return
            await self._emit(outcome, "retrying", error=error)
            if not offline:
                await asyncio.sleep(self._backoff(outcome.attempts))

    async def _attempt(
        self,
        subtask: Subtask,
        parameters: dict[str, Any],
        outcome: _State,
        tried: set[str],
    ) -> tuple[ResponseEnvelope | None, dict[str, Any] | None, bool]:
        timeout = subtask.timeout
        left = self._seconds_left()
        if left is not None:
            timeout = min(timeout, left)
        if timeout <= 0:
            return None, {"code": ErrorCode.TIMEOUT.value, "message": "plan deadline passed"}, False
        try:
            receiver = await self._receiver(subtask, tried)
        except NoCapableAgent as exc:
            return None, {"code": exc.code, "message": exc.message}, False
        # Built from known-valid values (ids from the validated plan, the bus's own id):
        # no validation on the way out.
        extra: dict[str, Any] = {NOTIFY_START: True, "plan_id": self.plan.id}
        extra["subtask_id"] = subtask.id
        metadata = Metadata.model_construct(deadline=utcnow() + timedelta(seconds=timeout), **extra)
        request = RequestEnvelope.model_construct(
            sender_id=self._bus.agent_id,
            receiver_id=receiver,
            payload=RequestPayload.model_construct(action=subtask.skill, parameters=parameters),
            metadata=metadata,
        )
        message_id = request.message_id
        attempt = _Attempt(message_id, asyncio.current_task())
        self._attempts[message_id] = attempt

        def on_start(notice: ResponseEnvelope) -> None:
            holder = notice.sender_id
            if attempt.holder is not None and attempt.holder != holder:
                outcome.attempts += 1  # the broker redelivered it to another instance
                # The old holder no longer has it: its agent_offline must not move it on.
                self._held_by.get(attempt.holder, set()).discard(message_id)
            attempt.holder = holder
            tried.add(holder)
            outcome.add_agent(holder)
            self._held_by.setdefault(holder, set()).add(message_id)
            self._emit_nowait(outcome, "running", agent_id=holder)

        try:
            # Awaited in this task, no second one: agent_offline cancels this task.
            reply = await self._bus.send_request(request, timeout=timeout, on_progress=on_start)
            return reply, None, False
        except RemoteError as exc:
            tried.add(exc.envelope.sender_id)
            outcome.add_agent(exc.envelope.sender_id)
            error = {"code": exc.code, "message": exc.message, "details": exc.details}
            return None, error, False
        except AgentBusError as exc:
            return None, {"code": exc.code, "message": exc.message}, False
        except asyncio.CancelledError:
            task = attempt.task
            if attempt.offline and task is not None and task.uncancel() == 0:
                # Cancelled by agent_offline alone: tell the holder to stop, move on.
                await self._send_cancel(attempt)
                message = f"agent {attempt.holder} went offline while holding the subtask"
                code = ErrorCode.AGENT_UNAVAILABLE.value
                return None, {"code": code, "message": message}, True
            # The plan is stopping: tell whoever holds the work to stop too.
            await asyncio.shield(self._send_cancel(attempt))
            raise
        finally:
            self._attempts.pop(message_id, None)
            if attempt.holder is not None:
                self._held_by.get(attempt.holder, set()).discard(message_id)

    async def _receiver(self, subtask: Subtask, tried: set[str]) -> str:
        if subtask.service is not None:
            return subtask.service
        agents = await self._directory.capable(subtask.skill, fresh=bool(tried))
        if not tried:
            return str(agents[0]["service"])
        others = [agent for agent in agents if agent["agent_id"] not in tried]
        # Prefer an instance that has not failed this subtask yet; else the whole pool.
        return str(others[0]["agent_id"] if others else agents[0]["service"])

    def _backoff(self, attempts: int) -> float:
        delay: float = min(self._retry_cap, self._retry_base * 2.0 ** (attempts - 1))
        delay *= self._rng.uniform(0.5, 1.5)
        left = self._seconds_left()
        return delay if left is None else min(delay, left)

    async def _finish(
        self,
        outcome: _State,
        status: SubtaskStatus,
        *,
        error: dict[str, Any] | None = None,
    ) -> None:
        outcome.status = status
        outcome.error = error
        outcome.ended = time.time()
        self._done += 1
        await self._emit(outcome, status.value, error=error)

    async def _emit(
        self,
        outcome: _State,
        transition: str,
        *,
        agent_id: str | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        self._emit_nowait(outcome, transition, agent_id=agent_id, error=error)

    def _emit_nowait(
        self,
        outcome: _State,
        transition: str,
        *,
        agent_id: str | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        if self._sink is None:
            return
        self._progress.append(
            Progress.model_construct(
                plan_id=self.plan.id,
                subtask_id=outcome.id,
                skill=outcome.skill,
                transition=transition,
                attempt=outcome.attempts,
                agent_id=agent_id,
                error=error,
                done=self._done,
                total=len(self._states),
            )
        )
        if len(self._progress) >= _PROGRESS_BATCH:
            self._progress_wake.set()

    async def _publish_progress(self) -> None:
        # Transitions go out in order, in batches (one event per interval or per full
        # batch), off the scheduler's path; the last batch before the aggregate.
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_PROGRESS_INTERVAL):
                    await self._progress_wake.wait()
            self._progress_wake.clear()
            finished = self._finished
            batch, self._progress = self._progress, []
            if batch and self._sink is not None:
                try:
                    await self._sink(batch)
                except Exception:
                    self._log.exception("progress not sent", transitions=len(batch))
            if finished and not self._progress:
                return

    def _aggregate(self, started_at: datetime, wall_time: float, error: str | None) -> Aggregate:
        counts = dict.fromkeys(SubtaskStatus, 0)
        agents: set[str] = set()
        attempts = 0
        failed_critical = error is not None
        outcomes: list[SubtaskOutcome] = []
        states = self._states
        # Each state makes way for its outcome as the list grows: the two never both
        # hold every subtask at once.
        for subtask_id in list(states):
            state = states.pop(subtask_id)
            counts[state.status] += 1
            attempts += state.attempts
            if state.agents:
                agents.update(state.agents)
            # Skipped work is partial; a critical subtask that failed (or a deadline) is failure.
            if state.status in (SubtaskStatus.FAILED, SubtaskStatus.CANCELLED):
                failed_critical = failed_critical or self._by_id[subtask_id].critical
            outcomes.append(state.outcome())
        if failed_critical:
            status = PlanStatus.FAILED
        elif counts[SubtaskStatus.SUCCEEDED] < len(outcomes):
            status = PlanStatus.PARTIAL
        else:
            status = PlanStatus.COMPLETED
        return Aggregate.model_construct(
            plan_id=self.plan.id,
            status=status,
            description=self.plan.description,
            subtasks=outcomes,
            totals=Totals.model_construct(
                subtasks=len(outcomes),
                succeeded=counts[SubtaskStatus.SUCCEEDED],
                failed=counts[SubtaskStatus.FAILED],
                skipped=counts[SubtaskStatus.SKIPPED],
                cancelled=counts[SubtaskStatus.CANCELLED],
                attempts=attempts,
                wall_time=round(wall_time, 6),
                agents_used=sorted(agents),
            ),
            started_at=started_at,
            ended_at=utcnow(),
            error=error,
        )


def _datetime(timestamp: float | None) -> datetime | None:
    return None if timestamp is None else datetime.fromtimestamp(timestamp, UTC)
