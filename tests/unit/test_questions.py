"""A skill asks its caller; the answer runs it again from the top, on any instance."""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest
from pydantic import BaseModel

from agentbus import (
    Agent,
    InputRequired,
    Question,
    QuestionClosed,
    RemoteError,
    Settings,
    UsageError,
    ask,
    current_request,
    remember,
    skill,
)
from agentbus.envelopes import (
    ErrorCode,
    RequestEnvelope,
    RequestPayload,
    ResponseStatus,
    utcnow,
)
from agentbus.testing import MemoryBroker, MemoryBus


class Trip(BaseModel):
    city: str
    nights: int


class Clerk(Agent):
    """Books trips, asking what it needs; counts what runs again on each answer."""

    name = "clerk"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.runs = 0
        self.reservations = 0

    @skill
    async def book(self, who: str) -> dict[str, object]:
        """Asks where and for how long, then whether to go ahead."""
        self.runs += 1
        seat = await remember("seat", self._reserve)
        trip = await ask(f"Where to, {who}?", Trip)
        sure = await ask(f"Book {trip.nights} nights in {trip.city}?", bool)
        context = current_request().metadata.context_id
        return {"who": who, "trip": trip.model_dump(), "booked": sure, "seat": seat, "ctx": context}

    @skill
    async def pick(self) -> str:
        colour: Literal["red", "blue"] = await ask("Red or blue?", Literal["red", "blue"])
        return colour

    @skill
    async def brief(self) -> str:
        return await ask("Anything?", within=0.001)

    async def _reserve(self) -> int:
        self.reservations += 1
        return self.reservations


async def test_a_question_and_its_answers_complete_the_work_once() -> None:
    """on_question gets each question in turn; the result holds every answer."""
    broker = MemoryBroker()
    asked: list[Question] = []

    async def answer(question: Question) -> object:
        asked.append(question)
        if question.turn == 0:
            return {"city": "Oslo", "nights": 2}
        return True

    clerk = Clerk(bus=MemoryBus(broker, agent_id="clerk-1"))
    async with clerk, MemoryBus(broker) as client:
        reply = await client.request(
            "clerk", "book", {"who": "ann"}, on_question=answer, context_id="trip-7"
        )
    assert reply.result == {
        "who": "ann",
        "trip": {"city": "Oslo", "nights": 2},
        "booked": True,
        "seat": 1,
        "ctx": "trip-7",
    }
    assert [q.text for q in asked] == ["Where to, ann?", "Book 2 nights in Oslo?"]
    assert asked[0].answer_schema["required"] == ["city", "nights"]
    assert asked[1].answer_schema == {"type": "boolean"}
    assert {q.context_id for q in asked} == {"trip-7"}
    assert {q.service for q in asked} == {"clerk"}
    # The skill ran once per answer, and what it remembered ran once.
    assert clerk.runs == 3
    assert clerk.reservations == 1


async def test_without_a_callback_the_question_is_raised_and_answered_later() -> None:
    """InputRequired carries the question; bus.answer continues from any process."""
    broker = MemoryBroker()
    clerk = Clerk(bus=MemoryBus(broker, agent_id="clerk-1"))
    async with clerk, MemoryBus(broker) as client:
        with pytest.raises(InputRequired) as first:
            await client.request("clerk", "book", {"who": "bo"})
        assert first.value.envelope.payload.status == ResponseStatus.INPUT_REQUIRED
        # Another client, knowing only the question's id, answers it.
        async with MemoryBus(broker) as other:
            with pytest.raises(InputRequired) as second:
                await other.answer(first.value.question.question_id, {"city": "Rome", "nights": 1})
            reply = await other.answer(second.value.question, False)
    assert reply.result["booked"] is False
    assert reply.result["trip"] == {"city": "Rome", "nights": 1}


async def test_a_bad_answer_is_asked_again_with_the_reason() -> None:
    """An answer that does not fit the schema: the same question, with why it was refused."""
    broker = MemoryBroker()
    async with Clerk(bus=MemoryBus(broker, agent_id="clerk-1")), MemoryBus(broker) as client:
        with pytest.raises(InputRequired) as first:
            await client.request("clerk", "pick")
        with pytest.raises(InputRequired) as again:
            await client.answer(first.value.question, "green")
        question = again.value.question
        assert question.text == "Red or blue?"
        assert question.rejected is not None
        assert question.rejected["answer"] == "green"
        assert question.question_id != first.value.question.question_id
        reply = await client.answer(question, "blue")
    assert reply.result == "blue"


async def test_an_answered_question_takes_no_second_answer() -> None:
    """The second answer to one question is refused with question_closed."""
    broker = MemoryBroker()
    async with Clerk(bus=MemoryBus(broker, agent_id="clerk-1")), MemoryBus(broker) as client:
        with pytest.raises(InputRequired) as first:
            await client.request("clerk", "pick")
        assert (await client.answer(first.value.question, "red")).result == "red"
        with pytest.raises(QuestionClosed) as closed:
            await client.answer(first.value.question, "blue")
    assert closed.value.details["reason"] == "answered"
    assert closed.value.code == ErrorCode.QUESTION_CLOSED


async def test_an_unknown_or_expired_question_is_closed() -> None:
    """Answers to questions never asked, or past their wait, say why they are refused."""
    broker = MemoryBroker()
    async with Clerk(bus=MemoryBus(broker, agent_id="clerk-1")), MemoryBus(broker) as client:
        with pytest.raises(QuestionClosed) as unknown:
            await client.answer("clerk.1700000000000.00ff", "x")
        with pytest.raises(InputRequired) as brief:
            await client.request("clerk", "brief")
        expires_at = brief.value.question.expires_at
        assert expires_at is not None
        # The wait itself is what is tested: past the question's 1 ms, the answer is late.
        await asyncio.sleep(max((expires_at - utcnow()).total_seconds(), 0) + 0.005)
        with pytest.raises(QuestionClosed) as expired:
            await client.answer(brief.value.question, "late")
    assert unknown.value.details["reason"] == "unknown"
    assert expired.value.details["reason"] == "expired"


async def test_a_declined_question_ends_the_work_as_cancelled() -> None:
    """Declining makes ask raise QuestionDeclined; unhandled, the caller gets cancelled."""
    broker = MemoryBroker()
    async with Clerk(bus=MemoryBus(broker, agent_id="clerk-1")), MemoryBus(broker) as client:
        with pytest.raises(InputRequired) as first:
            await client.request("clerk", "pick")
        with pytest.raises(RemoteError) as declined:
            await client.answer(first.value.question, decline=True)
    assert declined.value.code == ErrorCode.CANCELLED


async def test_an_older_caller_gets_the_question_as_an_error() -> None:
    """A 1.1 request is told input_required as an error envelope, the question in details."""
    broker = MemoryBroker()
    async with Clerk(bus=MemoryBus(broker, agent_id="clerk-1")), MemoryBus(broker) as client:
        old = RequestEnvelope(
            protocol_version="1.1",
            sender_id=client.agent_id,
            receiver_id="clerk",
            payload=RequestPayload(action="pick"),
        )
        with pytest.raises(InputRequired) as asked:
            await client.send_request(old, timeout=5)
    assert asked.value.envelope.message_type == "error"
    assert asked.value.question.text == "Red or blue?"


async def test_the_answer_may_come_to_another_instance() -> None:
    """The question is kept on the broker: a second instance takes the answer."""
    broker = MemoryBroker()
    settings = Settings()
    first = Clerk(bus=MemoryBus(broker, settings, agent_id="clerk-1"))
    async with first, MemoryBus(broker) as client:
        with pytest.raises(InputRequired) as asked:
            await client.request("clerk", "pick")
    second = Clerk(bus=MemoryBus(broker, settings, agent_id="clerk-2"))
    async with second, MemoryBus(broker) as client:
        reply = await client.answer(asked.value.question, "red")
    assert reply.result == "red"
    assert reply.sender_id == "clerk-2"


async def test_ask_outside_a_skill_is_a_usage_error() -> None:
    """Asking from anywhere but a running skill says so."""
    with pytest.raises(UsageError, match="inside a running skill"):
        await ask("hello?")


class Desk(Agent):
    name = "desk"

    @skill
    async def hold(self) -> str:
        """Asks a question whose answer must come to this instance."""
        return await ask("Which line?", here=True, data={"lines": 3})


async def test_a_question_asked_here_is_answered_by_this_instance() -> None:
    """here=True: the question names the instance; its answer goes there, not to the pool."""
    broker = MemoryBroker()
    first = Desk(bus=MemoryBus(broker, agent_id="desk-1"))
    second = Desk(bus=MemoryBus(broker, agent_id="desk-2"))
    async with first, second, MemoryBus(broker) as client:
        with pytest.raises(InputRequired) as asked:
            await client.request("desk", "hold")
        question = asked.value.question
        assert question.service == question.asker
        assert question.question_id.startswith(f"{question.asker}.")
        assert question.data == {"lines": 3}
        reply = await client.answer(question.question_id, "two")
    assert reply.result == "two"
    assert reply.sender_id == question.asker
