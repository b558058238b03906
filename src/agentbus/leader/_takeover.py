"""A durable plan's side of its run: each step journaled, and a plan taken over from where it was.

The runner of a durable plan is given a ``TakeOver``. Through it, each attempt's request
is journaled before it goes (under an id any leader would give it) and each subtask's end
after it; its answers come to the plan's own reply queue. A leader going on with a plan
another leader began learns from it which subtasks settled (not run again) and which were
in flight (their answers waited for before they are asked again); a leader stopping hands
the plan over: its work in flight runs on, for the next leader.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from typing import Any, Final

from agentbus._exceptions import AgentBusError, InputRequired, RemoteError, RequestTimeout
from agentbus._faults import fault_point
from agentbus._logging import get_logger
from agentbus.bus import ProgressCallback, Transport
from agentbus.envelopes import RequestEnvelope, ResponseEnvelope
from agentbus.leader._attempt import Flight
from agentbus.leader._durable import PlanJournal, Restored, Sent, restore_record
from agentbus.leader._record import SubtaskRecord

__all__ = ["TakeOver"]

_log = get_logger("agentbus.leader")

# Seconds a leader going on with a plan waits for the answer to a request the last leader
# had in flight before it sends that request again: over the agents' NOTIFY_START_AFTER.
_EARLIER_ANSWER_GRACE: Final = 1.0


class TakeOver:
    """A durable plan's journal, what an earlier leader left of the plan, its reply queue.

    Args:
        bus: The transport the plan's requests go on.
        journal: The plan's records in the leaders' journal.
        restored: What the journal said when this leader began the plan; None for a
            plan no leader began before.
        reply_to: The plan's reply queue, as ``send_request`` takes it.
        began: When the plan began (its questions' records say it, for a leader that
            resumes the plan to read its journal from then).
    """

    def __init__(
        self,
        bus: Transport,
        journal: PlanJournal,
        *,
        restored: Restored | None = None,
        reply_to: str,
        began: float | None = None,
    ) -> None:
        self.journal = journal
        self.reply_to = reply_to
        self._began = began
        self.is_handed_over = False
        """Whether the plan went to another leader (``hand_over``): its work runs on."""
        self._bus = bus
        self._restored = restored or Restored(leader="")
        # The answer each subtask got last, held on the reply queue until the journal has
        # what came of it: the subtask's end, or its next attempt.
        self._answered: dict[str, str] = {}
        self._releasing: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        restored = self._restored
        return (
            f"<TakeOver key={self.journal.key!r} settled={len(restored.settled)} "
            f"in_flight={len(restored.in_flight)} handed_over={self.is_handed_over}>"
        )

    def settled_before(self, record: SubtaskRecord) -> bool:
        """Make ``record`` what the journal says if another leader saw its subtask end;
        return whether it did (then the subtask is not run again)."""
        settled = self._restored.settled.get(record.id)
        if settled is None:
            return False
        restore_record(record, settled)
        return True

    def in_flight(self, subtask_id: str) -> Sent | None:
        """Return, once, the attempt another leader had in flight for the subtask."""
        return self._restored.in_flight.pop(subtask_id, None)

    def expanded(self, subtask_id: str) -> dict[str, Any] | None:
        """Return the fragment another leader had the step expand into, if any."""
        return self._restored.expanded.get(subtask_id)

    async def expand(self, subtask_id: str, fragment: dict[str, Any]) -> None:
        """Journal the fragment the step returned; then it runs."""
        await self.journal.expanded(subtask_id, fragment)
        self._release(subtask_id)  # the planner's answer: the journal has what came of it

    def asking(self, subtask_id: str) -> dict[str, Any] | None:
        """Return, once, the question another leader left the subtask waiting on (its
        ``asked`` record, with ``answer`` if one came)."""
        return self._restored.asking.pop(subtask_id, None)

    async def asked(
        self, subtask_id: str, question: dict[str, Any], asked: dict[str, Any] | None
    ) -> None:
        """Journal that the subtask waits for an answer; then the reply that asked (held
        on the plan's queue) leaves it."""
        await self.journal.asked(subtask_id, question, asked, began=self._began)
        self._release(subtask_id)

    async def answered(self, subtask_id: str, question_id: str, answer: dict[str, Any]) -> None:
        """Journal the answer the subtask's question got, before it goes on."""
        await self.journal.answered(subtask_id, question_id, answer)

    async def message_id(
        self, subtask_id: str, attempt: int, receiver: str, *, sent_before: bool
    ) -> str:
        """Return the request id of an attempt, the same whichever leader sends it; unless
        another leader sent it before, return once the journal has it (send it then)."""
        message_id = self.journal.message_id(subtask_id, attempt)
        if not sent_before:
            await self.journal.sent(subtask_id, attempt, message_id=message_id, receiver=receiver)
            self._release(subtask_id)  # the last attempt's answer: the journal has what followed
        return message_id

    def settled(self, record: SubtaskRecord, *, last: bool = False) -> None:
        """Journal a subtask's end (``flush`` waits for it; the plan's ``last`` step's goes
        with the plan's end); its answer leaves the reply queue once the journal has it."""
        # The worst moment to die: the answer is in, its end not journaled yet.
        fault_point("leader.settling")
        written = self.journal.settled(record, last=last)
        if record.id in self._answered:
            task = asyncio.create_task(self._release_when_journaled(record.id, written))
            self._releasing.add(task)
            task.add_done_callback(self._releasing.discard)

    async def flush(self) -> None:
        """Wait until the journal has every record so far."""
        await self.journal.flush()

    async def send(
        self,
        request: RequestEnvelope,
        timeout: float,
        on_progress: ProgressCallback,
        flight: Flight,
        *,
        subtask_id: str,
        sent_before: bool,
    ) -> ResponseEnvelope:
        """Send an attempt at ``subtask_id`` and return its answer, from the plan's reply
        queue (held there until the journal has what came of it); one another leader sent
        before is first waited for (``_earlier_answer``)."""
        try:
            reply = None
            if sent_before:
                reply = await self._earlier_answer(request, timeout, on_progress, flight)
            if reply is None:
                reply = await self._bus.send_request(
                    request, timeout=timeout, on_progress=on_progress, reply_to=self.reply_to
                )
        except (RemoteError, InputRequired):
            self._answered_by(subtask_id, request.message_id)
            raise
        self._answered_by(subtask_id, request.message_id)
        return reply

    def _answered_by(self, subtask_id: str, message_id: str) -> None:
        # The answer is in, its reply not acknowledged: a leader that dies before the
        # journal has what came of it leaves the answer to the next, who asks nothing again.
        self._answered[subtask_id] = message_id

    def _release(self, subtask_id: str) -> None:
        message_id = self._answered.pop(subtask_id, None)
        if message_id is not None:
            self._bus.release(message_id)

    async def _release_when_journaled(self, subtask_id: str, written: asyncio.Future[None]) -> None:
        try:
            await asyncio.shield(written)
        except AgentBusError as exc:
            # Not journaled: the answer stays on the queue, for the leader that goes on.
            _log.info("answer kept on the reply queue", subtask_id=subtask_id, error=str(exc))
            return
        self._release(subtask_id)

    async def hand_over(self, tasks: Collection[asyncio.Task[None]]) -> None:
        """Stop waiting on the plan's work, not the work: cancel the attempts' ``tasks``.

        The plan's request goes back to the queue and another leader goes on from the
        journal, taking the answers to the requests left in flight: an attempt cancelled
        now sends no ``cancel`` (``is_handed_over``).
        """
        self.is_handed_over = True
        for task in [*tasks, *self._releasing]:  # an answer not released stays for the next
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

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
                reply_to=self.reply_to,
                sent=True,
            )
        except RequestTimeout:
            if flight.holder is None:
                return None
        return await self._bus.send_request(
            request,
            timeout=timeout - (time.monotonic() - began),
            on_progress=on_progress,
            reply_to=self.reply_to,
            sent=True,
        )
