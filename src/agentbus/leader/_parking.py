"""A durable plan that waits only for people parks: its run ends, nothing held, until an answer.

A plan whose every step left waits for an answer, for ``park_after`` seconds, gives its
``run_plan`` delivery back acknowledged, with an ``in_progress`` reply: the broker's
consumer timeout never applies to a wait, and no leader holds the plan while people take
hours. The journal keeps every question and the request's origin, so the answer, taken by
any leader, resumes the plan there (``resume_plan``); its aggregate goes to the origin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Final

from agentbus.envelopes import Question, RequestEnvelope, ResponseEnvelope, ResponseStatus

__all__ = ["PARKED_STATE", "Origin", "PlanParked"]

PARKED_STATE: Final = "input_required"
"""The ``state`` of the ``in_progress`` reply of a plan that parked."""


class PlanParked(Exception):
    """The run stopped with every step left waiting for people: ``questions``. Nothing is
    in flight; a durable plan's journal has every question, for the answer to resume it."""

    def __init__(self, questions: list[Question]) -> None:
        super().__init__(f"{len(questions)} question(s) wait")
        self.questions = questions


@dataclass(frozen=True, slots=True)
class Origin:
    """Who asked for a plan and where its answer goes: kept in the journal, so a leader
    finishing the plan after it parked answers the request that began it."""

    requester: str
    request_id: str
    reply_to: str | None
    trace: str | None
    began: float

    @classmethod
    def of(cls, request: RequestEnvelope, reply_to: str | None) -> Origin:
        """The origin of the ``run_plan`` request being served (it began when sent)."""
        trace = request.metadata.trace
        began = request.timestamp.timestamp()
        return cls(request.sender_id, request.message_id, reply_to, trace, began)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Origin:
        """The origin as the journal keeps it."""
        return cls(
            requester=str(record["requester"]),
            request_id=str(record["request_id"]),
            reply_to=record.get("reply_to"),
            trace=record.get("trace"),
            began=float(record["began"]),
        )

    def record(self) -> dict[str, Any]:
        """The origin for the journal."""
        return asdict(self)

    def reply(self, sender_id: str, result: Any, status: ResponseStatus) -> ResponseEnvelope:
        """A reply to the request that began the plan."""
        metadata: dict[str, Any] = {"correlation_id": self.request_id, "trace": self.trace}
        return ResponseEnvelope.model_validate(
            {
                "sender_id": sender_id,
                "receiver_id": self.requester,
                "payload": {"status": status, "result": result},
                "metadata": metadata,
            }
        )

    def parked(self, sender_id: str, plan_id: str, questions: list[Question]) -> ResponseEnvelope:
        """The ``in_progress`` reply of a plan that parked: its questions wait."""
        result = {
            "agent_id": sender_id,
            "state": PARKED_STATE,
            "plan_id": plan_id,
            "questions": [question.model_dump(mode="json") for question in questions],
        }
        return self.reply(sender_id, result, ResponseStatus.IN_PROGRESS)
