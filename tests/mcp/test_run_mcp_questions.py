"""``run-mcp``: a remote MCP server's elicitations are questions to the bus caller.

The server (``wordsmith_mcp.py``'s ``sign``: two elicitations, the SDK's ``Resolve``) waits
in its session while the question waits on the bus; the answer comes back to the agent
instance that keeps the call, in both protocol eras (the 2025 server sends
``elicitation/create`` mid-call; the 2026-07-28 one ends the round with
``InputRequiredResult``).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from mcp_team import HEARTBEAT, Team

from agentbus import InputRequired, Question, QuestionClosed, QuestionDeclined, RemoteError
from agentbus.mcp import McpTarget, RemoteMcpAgent

WORDSMITH = [sys.executable, str(Path(__file__).with_name("wordsmith_mcp.py"))]
MODES = pytest.mark.parametrize("mode", ["legacy", "auto"])


async def signer(team: Team, mode: str = "auto", **options: object) -> RemoteMcpAgent:
    """The wordsmith on the bus (a command), speaking the protocol era ``mode``."""
    agent = await RemoteMcpAgent.connect(
        McpTarget(command=WORDSMITH, mode=mode),
        agent_id="words-1",
        settings=team.settings,
        heartbeat_interval=HEARTBEAT,
        **options,
    )
    await team.add(agent)
    return agent


@MODES
async def test_each_elicitation_is_a_question_and_the_answers_finish_the_call(
    team: Team, mode: str
) -> None:
    """Two questions, asked of this instance (``here``), with the form's schema; the
    answers reach the waiting server, and the call's result is the request's."""
    agent = await signer(team, mode)
    asked: list[Question] = []

    async def answer(question: Question) -> object:
        asked.append(question)
        return {"name": "Ann"} if question.turn == 0 else {"sure": True}

    reply = await team.client.request(
        agent.name, "sign", {"text": "the deal"}, timeout=15, on_question=answer
    )
    assert reply.result == "the deal -- Ann"
    first, second = asked
    assert first.text == "Who signs 'the deal'?"
    assert first.service == "words-1"  # the instance that keeps the call
    assert first.answer_schema["properties"] == {
        "name": {"minLength": 2, "title": "Name", "type": "string"}
    }
    assert first.answer_schema["required"] == ["name"]
    assert second.text == "Sign as Ann?"
    assert len(agent.waiting) == 0


async def test_an_answer_that_does_not_fit_the_form_is_asked_again(team: Team) -> None:
    """The form's own schema judges the answer (name: at least 2 characters)."""
    agent = await signer(team)
    with pytest.raises(InputRequired) as asked:
        await team.client.request(agent.name, "sign", {"text": "a will"}, timeout=15)
    with pytest.raises(InputRequired) as again:
        await team.client.answer(asked.value.question, {"name": "A"}, timeout=15)
    rejected = again.value.question.rejected
    assert rejected is not None
    assert rejected["answer"] == {"name": "A"}
    assert again.value.question.text == "Who signs 'a will'?"
    with pytest.raises(InputRequired) as sure:
        await team.client.answer(again.value.question, {"name": "Al"}, timeout=15)
    reply = await team.client.answer(sure.value.question, {"sure": False}, timeout=15)
    assert reply.result == "not signed"


@MODES
async def test_a_declined_question_declines_the_elicitation(team: Team, mode: str) -> None:
    """Declining the second question: the server's tool sees the decline and answers;
    declining the first: the server fails the call (its ``Resolve`` needs an answer)."""
    agent = await signer(team, mode)
    turns: list[int] = []

    async def decline_second(question: Question) -> object:
        turns.append(question.turn)
        if question.turn == 1:
            raise QuestionDeclined("no")
        return {"name": "Bo"}

    reply = await team.client.request(
        agent.name, "sign", {"text": "x"}, timeout=15, on_question=decline_second
    )
    assert (reply.result, turns) == ("not signed", [0, 1])

    async def decline(question: Question) -> object:
        raise QuestionDeclined("no")

    with pytest.raises(RemoteError) as failed:
        await team.client.request(
            agent.name, "sign", {"text": "y"}, timeout=15, on_question=decline
        )
    assert failed.value.code == "processing_failed"
    assert "decline" in failed.value.message
    assert len(agent.waiting) == 0


async def test_a_call_whose_question_waits_too_long_is_cancelled_and_forgotten(
    team: Team,
) -> None:
    """Past ``answer_within`` the question is closed, and the kept call is cancelled: the
    instance holds nothing more."""
    agent = await signer(team, answer_within=0.5)
    with pytest.raises(InputRequired) as asked:
        await team.client.request(agent.name, "sign", {"text": "late"}, timeout=15)
    assert len(agent.waiting) == 1
    question = asked.value.question
    assert question.expires_at is not None
    async with asyncio.timeout(10):
        while len(agent.waiting):  # noqa: ASYNC110 - the agent's own record
            await asyncio.sleep(0.05)
    with pytest.raises(QuestionClosed) as closed:
        await team.client.answer(question, {"name": "Late"}, timeout=15)
    assert closed.value.details["reason"] == "expired"


async def test_an_answer_for_a_call_this_instance_no_longer_keeps_is_told_so(
    team: Team,
) -> None:
    """The instance lost the call (as a restart would): the answer gets a clear error."""
    agent = await signer(team)
    with pytest.raises(InputRequired) as asked:
        await team.client.request(agent.name, "sign", {"text": "lost"}, timeout=15)
    await agent.waiting.aclose()
    with pytest.raises(RemoteError) as lost:
        await team.client.answer(asked.value.question, {"name": "Cy"}, timeout=15)
    assert lost.value.code == "agent_unavailable"
    assert "no longer kept here" in lost.value.message


async def test_a_2025_server_over_stdio_eliciting_beside_another_call_fails_the_call(
    team: Team,
) -> None:
    """Over stdio a 2025 server's elicitation names no call: with another running, it
    cannot be told whose, and is refused: the call fails at once, none waits. (One call at
    a time, the 2026-07-28 era, or HTTP, tell them apart.)"""
    agent = await signer(team, "legacy")
    working = asyncio.Event()
    busy = team.client.request(
        agent.name, "slow-wait", {"seconds": 5}, timeout=30, on_progress=lambda _: working.set()
    )
    waiting = asyncio.create_task(busy)
    try:
        await asyncio.wait_for(working.wait(), 15)  # the server holds that call
        with pytest.raises(RemoteError) as refused:
            await team.client.request(agent.name, "sign", {"text": "ab"}, timeout=15)
        assert "cannot tell which of its 2 calls" in refused.value.message
        assert (await waiting).result == "waited"  # the other call goes on
    finally:
        waiting.cancel()
