"""Running and recent plans, from the leaders' ``plan_progress`` broadcasts.

A plan's first report names every subtask (``outline``), so each is listed from the
start, pending until it runs; a plan first heard in the middle lists its subtasks from
their first transition. A skill's own ``progress`` and ``partial`` news keep its subtask
running, with its fraction, message and the number of partial results; a step waiting for
a person's answer shows ``input_required`` with the question. A plan that is
done shows the aggregate the transitions add up to (the leader's own aggregate goes to
the requester alone). Timings are the send times of the batches (the leader sends one
every 100 ms at most), so they are good to a tenth of a second."""

from __future__ import annotations

import collections
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from pydantic import ValidationError

from agentbus._exceptions import UsageError
from agentbus.bus import Feed, Transport
from agentbus.dashboard._files import PlanFiles
from agentbus.envelopes import BROADCAST, ArtifactRef, RequestEnvelope, RequestPayload, utcnow
from agentbus.leader import PLAN_PROGRESS, ProgressReport, SubtaskStatus

__all__ = ["PlanBoard"]

_KEEP: Final = 50  # finished plans kept on the board, newest first
# Transitions that do not end a subtask, and the status each shows: a skill's own news
# (progress, partial) keeps it running; input_required waits for a person's answer,
# holding no agent; answered runs it again.
_GOING_ON: Final = {
    "started": "running",
    "running": "running",
    "progress": "running",
    "partial": "running",
    "input_required": "input_required",
    "answered": "running",
    "retrying": "retrying",
}
_NOT_MET: Final = "condition_not_met"
# A mapped step's items on the board: how many are listed, and which come first.
_ITEMS_SHOWN: Final = 20
_ITEM_FIRST: Final = {"failed": 0, "input_required": 1, "retrying": 2, "running": 3}
_ITEM: Final = re.compile(r"(?P<step>.+)\[(?P<index>\d+)\]")
_TERMINAL: Final = frozenset(
    {SubtaskStatus.SUCCEEDED, SubtaskStatus.FAILED, SubtaskStatus.SKIPPED, SubtaskStatus.CANCELLED}
)


@dataclass(slots=True)
class _Subtask:
    id: str
    skill: str
    status: str = "pending"
    agent_id: str | None = None
    attempts: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error: dict[str, Any] | None = None
    fraction: float | None = None
    message: str | None = None
    chunks: int = 0
    depends_on: tuple[str, ...] = ()

    def view(self) -> dict[str, Any]:
        duration = None
        if self.started_at is not None and self.ended_at is not None:
            duration = round((self.ended_at - self.started_at).total_seconds(), 3)
        return {
            "id": self.id,
            "skill": self.skill,
            "status": self.status,
            "agent_id": self.agent_id,
            "attempts": self.attempts,
            "started_at": _iso(self.started_at),
            "ended_at": _iso(self.ended_at),
            "duration": duration,
            "error": self.error,
            "fraction": self.fraction,
            "message": self.message,
            "chunks": self.chunks,
            "depends_on": list(self.depends_on),
        }


@dataclass(slots=True)
class _Plan:
    plan_id: str
    leader: str
    total: int
    first_seen: datetime
    request_id: str | None = None
    done: int = 0
    last_seen: datetime | None = None
    cancel_requested: bool = False
    subtasks: dict[str, _Subtask] = field(default_factory=dict)
    files: PlanFiles = field(default_factory=PlanFiles)

    @property
    def finished(self) -> bool:
        return self.done >= self.total

    def view(self) -> dict[str, Any]:
        steps = [s for s in self.subtasks.values() if _parent_of(s.id) is None]
        counts = collections.Counter(subtask.status for subtask in steps)
        counts["pending"] += max(self.total - len(steps), 0)
        view: dict[str, Any] = {
            "plan_id": self.plan_id,
            "leader": self.leader,
            "done": self.done,
            "total": self.total,
            "state": "finished" if self.finished else "running",
            "started_at": _iso(self.first_seen),
            "updated_at": _iso(self.last_seen),
            "cancellable": self.request_id is not None and not self.finished,
            "cancel_requested": self.cancel_requested,
            "counts": dict(counts),
            "subtasks": _nested(list(self.subtasks.values())),
            "artifacts": self.files.view(),
            "artifacts_left_out": self.files.left_out,
            "aggregate": None,
        }
        if self.finished:
            view["aggregate"] = self._aggregate(steps)
        return view

    def _aggregate(self, steps: list[_Subtask]) -> dict[str, Any]:
        # A step whose condition did not hold is as complete as one that ran (as the leader says).
        succeeded = sum(
            step.status == SubtaskStatus.SUCCEEDED.value
            or (step.error or {}).get("code") == _NOT_MET
            for step in steps
        )
        if succeeded >= self.total:
            status = "completed"
        elif succeeded == 0:
            status = "failed"
        else:
            status = "partial"
        wall = None
        if self.last_seen is not None:
            wall = round((self.last_seen - self.first_seen).total_seconds(), 3)
        agents = sorted({s.agent_id for s in self.subtasks.values() if s.agent_id is not None})
        return {
            "status": status,
            "wall_time": wall,
            "attempts": self._attempts(),
            "agents_used": agents,
        }

    def _attempts(self) -> int:
        # A mapped step's own count is its items' (their attempts are counted one by one).
        mapped = {p[0] for s in self.subtasks if (p := _parent_of(s)) and p[1] == "item"}
        return sum(s.attempts for s in self.subtasks.values() if s.id not in mapped)


class PlanBoard:
    """Plans as their progress events tell them; a plan can be cancelled from here.

    ``on_report`` is handed each report with its leader's id (the question board follows
    the plans' questions through it).
    """

    def __init__(
        self,
        bus: Transport,
        *,
        on_change: Callable[[], None],
        on_report: Callable[[str, ProgressReport], None] | None = None,
        keep: int = _KEEP,
    ) -> None:
        self._bus = bus
        self._on_change = on_change
        self._on_report = on_report if on_report is not None else _ignore
        self._keep = keep
        self._plans: dict[str, _Plan] = {}
        self._feed: Feed | None = None
        self.malformed = 0

    async def start(self) -> None:
        """Follow every leader's progress broadcasts."""
        self._feed = await self._bus.consume_feed(
            f"{BROADCAST}.event.{PLAN_PROGRESS}", self._on_progress, name="dashboard-plans"
        )

    async def aclose(self) -> None:
        if self._feed is not None:
            await self._feed.aclose()

    def snapshot(self) -> dict[str, Any]:
        """Running plans first, then the finished ones, newest first."""
        plans = sorted(
            self._plans.values(), key=lambda plan: (plan.finished, -plan.first_seen.timestamp())
        )
        return {"plans": [plan.view() for plan in plans]}

    def artifact(self, plan_id: str, artifact_id: str) -> ArtifactRef | None:
        """The reference of an artifact a step of ``plan_id`` returned, if one did."""
        plan = self._plans.get(plan_id)
        return None if plan is None else plan.files.get(artifact_id)

    async def cancel(self, plan_id: str) -> dict[str, Any]:
        """Ask the plan's leader to stop it: a broadcast ``cancel`` of its ``run_plan`` request.

        Raises:
            UsageError: the plan is not known, is finished, or its leader did not say
                which request runs it.
        """
        plan = self._plans.get(plan_id)
        if plan is None:
            raise UsageError(f"no plan {plan_id!r} is known")
        if plan.finished:
            raise UsageError(f"plan {plan_id!r} is finished")
        if plan.request_id is None:
            raise UsageError(f"the leader of plan {plan_id!r} does not say which request runs it")
        cancel = RequestEnvelope(
            sender_id=self._bus.agent_id,
            receiver_id=BROADCAST,
            payload=RequestPayload(action="cancel", parameters={"message_id": plan.request_id}),
        )
        await self._bus.publish(cancel, persistent=False, mandatory=False, timeout=5)
        plan.cancel_requested = True
        self._on_change()
        return {"plan_id": plan_id, "request_id": plan.request_id, "cancel_sent": True}

    def _on_progress(self, envelope: dict[str, Any]) -> None:
        payload = envelope.get("payload")
        data = payload.get("event_data") if isinstance(payload, dict) else None
        try:
            report = ProgressReport.model_validate(data)
        except ValidationError:
            self.malformed += 1
            return
        at = _timestamp(envelope.get("timestamp"))
        leader = str(envelope.get("sender_id"))
        self._on_report(leader, report)
        plan = self._plans.get(report.plan_id)
        if plan is None:
            plan = _Plan(
                plan_id=report.plan_id,
                leader=leader,
                total=report.total,
                first_seen=at,
            )
            for item in report.outline or ():
                subtask = _outlined(item)
                if subtask is not None:
                    plan.subtasks[subtask.id] = subtask
            self._plans[report.plan_id] = plan
            self._forget_old()
        plan.request_id = report.request_id or plan.request_id
        plan.done = max(plan.done, report.done)
        plan.last_seen = at
        for progress in report.transitions:
            subtask = plan.subtasks.get(progress.subtask_id)
            if subtask is None:
                subtask = plan.subtasks[progress.subtask_id] = _Subtask(
                    progress.subtask_id, progress.skill
                )
            _apply(subtask, progress.transition, progress.agent_id, progress.error, at)
            if progress.detail is not None:
                _note(subtask, progress.transition, progress.detail)
                if progress.transition == SubtaskStatus.SUCCEEDED.value:
                    plan.files.take(progress.subtask_id, progress.detail)
            subtask.attempts = max(subtask.attempts, progress.attempt)
        self._on_change()

    def _forget_old(self) -> None:
        finished = [plan for plan in self._plans.values() if plan.finished]
        finished.sort(key=lambda plan: plan.first_seen)
        for plan in finished[: max(len(finished) - self._keep, 0)]:
            del self._plans[plan.plan_id]


def _ignore(leader: str, report: ProgressReport) -> None:
    pass


def _apply(
    subtask: _Subtask,
    transition: str,
    agent_id: str | None,
    error: dict[str, Any] | None,
    at: datetime,
) -> None:
    going_on = _GOING_ON.get(transition)
    if going_on is not None:
        subtask.status = going_on
        if transition in ("started", "running"):
            subtask.started_at = subtask.started_at or at
        if transition in ("running", "progress", "partial"):
            subtask.agent_id = agent_id or subtask.agent_id
        if transition == "retrying":
            subtask.error = error
        return
    # A terminal status, by its name (succeeded says which agent answered).
    subtask.status = transition
    subtask.agent_id = agent_id or subtask.agent_id
    subtask.error = error
    subtask.ended_at = at
    if transition in _TERMINAL and subtask.started_at is None:
        subtask.started_at = at  # skipped (or cancelled before it started): no time spent


def _parent_of(subtask_id: str) -> tuple[str, str] | None:
    """``(parent, kind)``: a mapped step's item ``s[3]`` is under ``s`` (``item``), a fragment's
    step ``s/t`` under ``s`` (``fragment``); a step of the plan itself has none."""
    item = _ITEM.fullmatch(subtask_id)
    if item is not None:
        return item["step"], "item"
    step, slash, _ = subtask_id.rpartition("/")
    return (step, "fragment") if slash and step else None


def _nested(subtasks: list[_Subtask]) -> list[dict[str, Any]]:
    """The rows in plan order, each step's items and fragment steps right under it; a mapped
    step says how its items stand and lists at most ``_ITEMS_SHOWN`` of them (the ones that
    need a look first: failed, asking, running), so a map over 10,000 items stays a page."""
    rows = {subtask.id: subtask.view() | {"parent": None, "kind": "step"} for subtask in subtasks}
    children: dict[str | None, list[str]] = collections.defaultdict(list)
    items: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for subtask_id, row in rows.items():
        parent = _parent_of(subtask_id)
        if parent is not None and parent[0] in rows:
            row["parent"], row["kind"] = parent
        if row["kind"] == "item":
            items[row["parent"]].append(row)
        else:
            children[row["parent"]].append(subtask_id)
    for step, its in items.items():
        rows[step]["items"] = {
            "total": len(its),
            "counts": dict(collections.Counter(row["status"] for row in its)),
            "shown": min(len(its), _ITEMS_SHOWN),
        }
        its.sort(key=_item_order)
    ordered: list[dict[str, Any]] = []

    def place(parent: str | None) -> None:
        for subtask_id in children[parent]:
            ordered.append(rows[subtask_id])
            ordered.extend(items.get(subtask_id, [])[:_ITEMS_SHOWN])
            place(subtask_id)

    place(None)
    return ordered


def _item_order(row: dict[str, Any]) -> tuple[int, int]:
    item = _ITEM.fullmatch(row["id"])
    index = int(item["index"]) if item is not None else 0
    return _ITEM_FIRST.get(row["status"], len(_ITEM_FIRST)), index


def _outlined(item: object) -> _Subtask | None:
    if not isinstance(item, dict):
        return None
    subtask_id, skill, depends_on = item.get("id"), item.get("skill"), item.get("depends_on")
    if not (isinstance(subtask_id, str) and isinstance(skill, str)):
        return None
    after = (
        tuple(d for d in depends_on if isinstance(d, str)) if isinstance(depends_on, list) else ()
    )
    return _Subtask(subtask_id, skill, depends_on=after)


def _note(subtask: _Subtask, transition: str, detail: dict[str, Any]) -> None:
    if transition == "progress":
        fraction, message = detail.get("fraction"), detail.get("message")
        if isinstance(fraction, int | float) and not isinstance(fraction, bool):
            subtask.fraction = max(0.0, min(1.0, float(fraction)))
        if isinstance(message, str):
            subtask.message = message[:200]
    elif transition == "partial":
        subtask.chunks += 1
    elif transition == "input_required":
        question = detail.get("question")
        text = question.get("text") if isinstance(question, dict) else None
        subtask.message = f"asks: {text[:200]}" if isinstance(text, str) else None
    elif transition == "answered":
        subtask.message = None


def _timestamp(value: object) -> datetime:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    return utcnow()


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()
