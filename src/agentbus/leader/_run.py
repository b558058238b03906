"""Run one plan: start what the graph allows, retry with backoff, fail over, cancel, aggregate."""

from __future__ import annotations

import asyncio
import enum
import math
import random
import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any, Final

from agentbus._exceptions import (
    AgentBusError,
    NoCapableAgent,
    RemoteError,
    RequestTimeout,
    UsageError,
)
from agentbus._logging import get_logger
from agentbus._tracing import child_trace, end_span, start_span
from agentbus.agents import NOTIFY_START, CancelCause, cancel_cause, send_cancel
from agentbus.bus import ProgressCallback, Transport, current_trace
from agentbus.envelopes import RequestEnvelope, ResponseEnvelope, utcnow
from agentbus.leader._aggregate import Aggregate, SubtaskOutcome, SubtaskStatus
from agentbus.leader._attempt import (
    Answered,
    AttemptResult,
    Failed,
    Flight,
    Holders,
    SubtaskError,
)
from agentbus.leader._directory import SkillDirectory
from agentbus.leader._durable import PlanJournal, Restored, Sent, restore_record
from agentbus.leader._graph import PlanGraph, Skip, Stop
from agentbus.leader._plan import Plan, Subtask, resolve_input
from agentbus.leader._progress import ProgressSink, ProgressStream
from agentbus.leader._record import SubtaskRecord, tally

__all__ = ["Cancellation", "PlanRunner", "RunState"]

_log = get_logger("agentbus.leader")

# Seconds a leader going on with a plan waits for the answer to a request the last leader
# had in flight before it sends that request again: over the agents' NOTIFY_START_AFTER.
_EARLIER_ANSWER_GRACE: Final = 1.0


class RunState(enum.Enum):
    """Where a plan runner is in its one run."""

    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    STOPPED = "stopped"


class Cancellation(enum.Enum):
    """Why a run was cancelled from outside; the value is its ``stop_reason``."""

    REQUESTED = "the plan was cancelled by request"
    """A ``cancel`` request for the plan's ``run_plan`` request."""
    LEADER_STOPPING = "the leader is stopping"
    """The leader is stopping: the plan's work is cancelled with it."""
    HANDED_OVER = "the leader is stopping: the plan goes on under another"
    """The leader is stopping, and the durable plan goes on under another: its work runs on."""


class PlanRunner:
    """Runs one validated plan on a transport and returns its aggregate; once.

    ``state`` says where the run is; ``stop_reason`` says why a stopped run stopped early
    (a critical subtask failed, the plan's deadline passed, or the leader is stopping);
    ``cancellation`` says why a run cancelled from outside was (None until it is).
    """

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
        journal: PlanJournal | None = None,
        restored: Restored | None = None,
        reply_to: str | None = None,
    ) -> None:
        self.plan = plan
        self.state = RunState.PENDING
        self.stop_reason: str | None = None
        self.cancellation: Cancellation | None = None
        self._bus = bus
        self._directory = directory
        self._retry_base = retry_base
        self._retry_cap = retry_cap
        self._rng = rng or random.Random()
        self._graph = PlanGraph(plan)
        self._by_id = {subtask.id: subtask for subtask in plan.subtasks}
        self._records = {s.id: SubtaskRecord(s.id, s.skill) for s in plan.subtasks}
        self._results: dict[str, Any] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}  # by subtask id, named after it
        self._ended: asyncio.Queue[asyncio.Task[None]] = asyncio.Queue()
        self._holders = Holders()
        self._deadline: datetime | None = None
        self._spent: Counter[str] = Counter()  # what the answers so far used, by unit
        self._trace = current_trace()  # the run_plan request's, when a leader serves one
        self._journal = journal
        self._restored = restored or Restored(leader="")
        self._reply_to = reply_to
        self._done = 0
        self._progress = ProgressStream(progress, plan_id=plan.id, total=len(plan.subtasks))
        self._log = _log.bind(plan_id=plan.id)

    def __repr__(self) -> str:
        return (
            f"<PlanRunner plan_id={self.plan.id!r} state={self.state.value} "
            f"done={self._done}/{len(self._by_id)}>"
        )

    def snapshot(self) -> tuple[int, list[SubtaskOutcome]]:
        """How many subtasks have ended, and each one's outcome so far (a running plan)."""
        return self._done, [record.outcome() for record in self._records.values()]

    def agent_offline(self, agent_id: str) -> None:
        """Move on at once from the work an agent reported offline was holding."""
        self._directory.forget(agent_id)
        for flight in self._holders.gone(agent_id):
            # The attempt's task waits on the reply: cancelled, it sees ``offline`` and
            # moves on. (A reply already in and not yet taken is lost with it, as is
            # one still on its way: the subtask is tried again.)
            assert flight.task is not None
            flight.task.cancel()

    async def run(self) -> Aggregate:
        """Run the plan to its end and return the aggregate.

        Raises:
            UsageError: this runner has run already; a runner runs one plan once.
        """
        if self.state is not RunState.PENDING:
            raise UsageError(
                f"the runner of plan {self.plan.id!r} has run already ({self.state.value}): "
                "make a new PlanRunner to run it again"
            )
        self.state = RunState.RUNNING
        started_at, started = utcnow(), time.monotonic()
        self._deadline = self.plan.deadline_at(started_at)
        async with self._progress:
            try:
                await self._schedule()
            except asyncio.CancelledError as exc:
                await self._cancelled(cancel_cause(exc))
                raise
        if self.state is RunState.RUNNING:
            self.state = RunState.FINISHED
        if self._journal is not None:
            await self._journal.flush()
        return tally(
            self.plan,
            self._records,
            started_at=started_at,
            wall_time=time.monotonic() - started,
            error=self.stop_reason,
        )

    async def _cancelled(self, cause: CancelCause | None) -> None:
        if cause is CancelCause.REQUEST:  # a cancel request for the plan
            self.cancellation = Cancellation.REQUESTED
        elif self._journal is not None:
            self.cancellation = Cancellation.HANDED_OVER
            await self._hand_over()
            return
        else:
            self.cancellation = Cancellation.LEADER_STOPPING
        reason = self.cancellation.value
        # Everything launched, whether the graph still counts it or not.
        self._graph.stop(reason)
        await self._stop(Stop(reason, tuple(self._tasks)))

    async def _hand_over(self) -> None:
        # A durable plan outlives this leader: its request goes back to the queue and
        # another leader goes on from the journal, so the work in flight is left running.
        self.state = RunState.STOPPED
        self.stop_reason = Cancellation.HANDED_OVER.value
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _schedule(self) -> None:
        graph = self._graph
        while True:
            for subtask_id in graph.start():
                self._launch(self._by_id[subtask_id])
            if graph.is_finished:
                break
            ended = await self._next_ended()
            if ended is None:  # the plan's deadline passed with work still running
                await self._stop(graph.stop("the plan's deadline passed"))
                break
            for effect in graph.settle((i, self._records[i].status) for i in ended):
                await self._carry_out(effect)
        reason = self.stop_reason or "a dependency did not succeed"
        for subtask_id in graph.unstarted():
            self._finish(self._records[subtask_id], SubtaskError.skipped(reason))

    def _launch(self, subtask: Subtask) -> None:
        task = asyncio.create_task(self._execute(subtask), name=subtask.id)
        # Finished tasks arrive on a queue: no scan over everything running at each end.
        task.add_done_callback(self._ended.put_nowait)
        self._tasks[subtask.id] = task

    async def _next_ended(self) -> list[str] | None:
        # The subtasks that ended since the last call (at least one); None at the deadline.
        try:
            async with asyncio.timeout(self._seconds_left()):
                done = [await self._ended.get()]
        except TimeoutError:
            return None
        while not self._ended.empty():
            done.append(self._ended.get_nowait())
        # A task a stop cancelled ends later: it is no longer the graph's business.
        return [task.get_name() for task in done if self._tasks.pop(task.get_name(), None) is task]

    async def _carry_out(self, effect: Skip | Stop) -> None:
        if isinstance(effect, Stop):
            await self._stop(effect)
            return
        reason = f"dependency {effect.cause!r} did not succeed"
        self._finish(self._records[effect.subtask_id], SubtaskError.skipped(reason))

    async def _stop(self, stop: Stop) -> None:
        self.state = RunState.STOPPED
        self.stop_reason = stop.reason
        tasks = [self._tasks[subtask_id] for subtask_id in stop.cancel]
        for task in tasks:
            task.cancel()
        # Each cancelled attempt sends its own cancel request before it ends.
        await asyncio.gather(*tasks, return_exceptions=True)
        for subtask_id in stop.cancel:
            self._tasks.pop(subtask_id, None)
            record = self._records[subtask_id]
            if not record.is_settled:
                self._finish(record, SubtaskError.cancelled(stop.reason))

    async def _execute(self, subtask: Subtask) -> None:
        record = self._records[subtask.id]
        settled = self._restored.settled.get(subtask.id)
        if settled is not None:  # another leader saw it end: not run again
            self._take_over(record, settled)
            return
        try:
            parameters = {
                **subtask.parameters,
                **{name: resolve_input(ref, self._results) for name, ref in subtask.inputs.items()},
            }
        except KeyError as exc:
            self._finish(record, SubtaskError.missing_input(exc.args[0]))
            return
        record.status = SubtaskStatus.RUNNING
        record.started = time.time()
        self._emit(record, "started")
        tried: set[str] = set()
        in_flight = self._restored.in_flight.pop(subtask.id, None)
        if in_flight is not None:  # another leader's attempt: asked again under its id
            record.attempts = in_flight.attempt - 1
        while True:
            record.attempts += 1
            result = await self._attempt(subtask, parameters, record, tried, in_flight)
            in_flight = None
            if isinstance(result, Answered):
                self._results[subtask.id] = record.result = result.result
                if result.usage:
                    record.usage = result.usage
                    self._spent.update(result.usage)
                record.add_agent(result.agent_id)
                self._finish(record, agent_id=result.agent_id)
                return
            error = result.error
            out_of_time = self._seconds_left() == 0 or self._over_budget()
            if error.is_final or record.attempts > subtask.retries or out_of_time:
                self._finish(record, error)
                return
            self._emit(record, "retrying", error=error)
            if not result.holder_gone:
                await asyncio.sleep(self._backoff(record.attempts))

    async def _attempt(
        self,
        subtask: Subtask,
        parameters: dict[str, Any],
        record: SubtaskRecord,
        tried: set[str],
        in_flight: Sent | None = None,
    ) -> AttemptResult:
        timeout = subtask.timeout
        left = self._seconds_left()
        if left is not None:
            timeout = min(timeout, left)
        if timeout <= 0:
            return Failed(SubtaskError.deadline())
        if self._over_budget():
            assert self.plan.budget is not None
            return Failed(SubtaskError.over_budget(dict(self._spent), self.plan.budget))
        try:
            receiver = in_flight.receiver if in_flight else await self._receiver(subtask, tried)
        except NoCapableAgent as exc:
            return Failed(SubtaskError.of(exc))
        metadata: dict[str, Any] = {
            "deadline": utcnow() + timedelta(seconds=timeout),
            NOTIFY_START: True,
            "plan_id": self.plan.id,
            "subtask_id": subtask.id,
        }
        # The plan's trace (its run_plan request's) goes on to every subtask.
        span = start_span(
            f"plan step {subtask.id}",
            "internal",
            self._trace,
            {"agentbus.plan.id": self.plan.id, "agentbus.subtask.id": subtask.id},
        )
        trace = child_trace(span, self._trace)
        if trace is not None:
            metadata["trace"] = trace
        fields: dict[str, Any] = {
            "sender_id": self._bus.agent_id,
            "receiver_id": receiver,
            "payload": {"action": subtask.skill, "parameters": parameters},
            "metadata": metadata,
        }
        if self._journal is not None:  # the same id whichever leader sends it
            fields["message_id"] = self._journal.message_id(subtask.id, record.attempts)
            if in_flight is None:
                await self._journal.sent(
                    subtask.id, record.attempts, message_id=fields["message_id"], receiver=receiver
                )
        # One validation of plain dicts: half the cost of model_construct's Python loop.
        request = RequestEnvelope.model_validate(fields)
        result: AttemptResult | None = None
        try:
            result = await self._send(request, timeout, record, tried, asked_before=bool(in_flight))
        finally:
            outcome = "cancelled" if result is None else "success"
            if isinstance(result, Failed):
                outcome = result.error.code
            end_span(span, outcome)
        return result

    async def _send(
        self,
        request: RequestEnvelope,
        timeout: float,
        record: SubtaskRecord,
        tried: set[str],
        *,
        asked_before: bool = False,
    ) -> AttemptResult:
        flight = self._holders.track(request.message_id, asyncio.current_task())

        def on_progress(notice: ResponseEnvelope) -> None:
            holder = notice.sender_id
            update = notice.payload.result if isinstance(notice.payload.result, dict) else {}
            state = str(update.get("state", "started"))
            if state == "started" or flight.holder != holder:  # its first word: it holds it
                if self._holders.hand_to(flight, holder):
                    record.attempts += 1  # the broker redelivered it to another instance
                tried.add(holder)
                record.add_agent(holder)
                self._emit(record, "running", agent_id=holder)
            if state != "started":  # the skill's own progress, or a partial result
                detail = {k: v for k, v in update.items() if k not in ("state", "agent_id")}
                self._emit(record, state, agent_id=holder, detail=detail)

        try:
            # Awaited in this task, no second one: agent_offline cancels this task.
            reply = None
            if asked_before:
                reply = await self._earlier_answer(request, timeout, on_progress, flight)
            if reply is None:
                reply = await self._bus.send_request(
                    request, timeout=timeout, on_progress=on_progress, reply_to=self._reply_to
                )
            return Answered(reply.payload.result, reply.sender_id, _usage(reply))
        except RemoteError as exc:
            tried.add(exc.envelope.sender_id)
            record.add_agent(exc.envelope.sender_id)
            return Failed(SubtaskError.of(exc))
        except AgentBusError as exc:
            return Failed(SubtaskError.of(exc))
        except asyncio.CancelledError:
            if self.cancellation is Cancellation.HANDED_OVER:
                raise
            if flight.offline and flight.task is not None and flight.task.uncancel() == 0:
                # Cancelled by agent_offline alone: tell the holder to stop, move on.
                await self._send_cancel(flight)
                return Failed(SubtaskError.holder_offline(flight.holder), holder_gone=True)
            # The plan is stopping: tell whoever holds the work to stop too.
            await asyncio.shield(self._send_cancel(flight))
            raise
        finally:
            self._holders.release(flight)

    async def _earlier_answer(
        self,
        request: RequestEnvelope,
        timeout: float,
        on_progress: ProgressCallback,
        flight: Flight,
    ) -> ResponseEnvelope | None:
        # Another leader's attempt, in flight when that leader went: an instance may be
        # running it now, and its answer comes to the plan's reply queue. Sent again at
        # once, the copy could run on a second instance beside the first (de-duplication
        # shares finished work only), so wait a moment for the answer first, and for as
        # long as an instance says it holds the work. None: send it again.
        began = time.monotonic()
        try:
            return await self._bus.send_request(
                request,
                timeout=min(timeout, _EARLIER_ANSWER_GRACE),
                on_progress=on_progress,
                reply_to=self._reply_to,
                sent=True,
            )
        except RequestTimeout:
            if flight.holder is None:
                return None
        return await self._bus.send_request(
            request,
            timeout=timeout - (time.monotonic() - began),
            on_progress=on_progress,
            reply_to=self._reply_to,
            sent=True,
        )

    async def _send_cancel(self, flight: Flight) -> None:
        # To the instance holding the work when known, else to everyone: whoever has it stops.
        await send_cancel(self._bus, flight.message_id, holder=flight.holder, log=self._log)

    async def _receiver(self, subtask: Subtask, tried: set[str]) -> str:
        if subtask.service is not None:
            return subtask.service
        agents = await self._directory.capable(subtask.skill, fresh=bool(tried))
        if not tried:
            return agents[0].service
        others = [agent for agent in agents if agent.agent_id not in tried]
        # Prefer an instance that has not failed this subtask yet; else the whole pool.
        return others[0].agent_id if others else agents[0].service

    def _seconds_left(self) -> float | None:
        if self._deadline is None:
            return None
        return max((self._deadline - utcnow()).total_seconds(), 0.0)

    def _backoff(self, attempts: int) -> float:
        delay: float = min(self._retry_cap, self._retry_base * 2.0 ** (attempts - 1))
        delay *= self._rng.uniform(0.5, 1.5)
        left = self._seconds_left()
        return delay if left is None else min(delay, left)

    def _finish(
        self,
        record: SubtaskRecord,
        error: SubtaskError | None = None,
        *,
        agent_id: str | None = None,
    ) -> None:
        record.status = SubtaskStatus.SUCCEEDED if error is None else error.status
        record.error = error
        record.ended = time.time()
        self._done += 1
        if self._journal is not None:
            self._journal.settled(record)
        self._emit(record, record.status.value, agent_id=agent_id, error=error)

    def _take_over(self, record: SubtaskRecord, settled: dict[str, Any]) -> None:
        restore_record(record, settled)
        if record.status is SubtaskStatus.SUCCEEDED:
            self._results[record.id] = record.result
        self._spent.update(record.usage or {})
        self._done += 1
        self._emit(record, record.status.value, error=record.error)

    def _over_budget(self) -> bool:
        # Once one unit's cap is reached no attempt starts: like the deadline.
        budget = self.plan.budget or {}
        return any(self._spent[unit] >= cap for unit, cap in budget.items())

    def _emit(
        self,
        record: SubtaskRecord,
        transition: str,
        *,
        agent_id: str | None = None,
        error: SubtaskError | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        self._progress.emit(
            record, transition, done=self._done, agent_id=agent_id, error=error, detail=detail
        )


def _usage(reply: ResponseEnvelope) -> dict[str, float] | None:
    # metadata.usage as the agent sent it; anything but a map of unit to amount is ignored.
    usage = (reply.metadata.model_extra or {}).get("usage")
    if not isinstance(usage, dict):
        return None
    amounts = {
        str(unit): float(amount)
        for unit, amount in usage.items()
        if isinstance(amount, int | float)
        and not isinstance(amount, bool)
        and math.isfinite(amount)
        and amount >= 0
    }
    return amounts or None
