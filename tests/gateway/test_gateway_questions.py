"""A bus skill's questions through the gateway: the task waits for input, a follow-up answers.

The official a2a-sdk client talks to a gateway on the real broker; the clerk asks where to,
then how many nights, and books. The A2A example of docs/conversations.md runs here too.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import re
from pathlib import Path
from typing import Any

import pytest
from a2a.client import Client
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import UnsupportedOperationError
from a2a_client import data_of, sdk_client, send, state_name, user_message
from gateway_agents import Calc, Clerk
from gateway_team import HEARTBEAT, KEY, Team

from agentbus import QuestionClosed
from agentbus.gateway import ApiKeys
from support.waiting import wait_until

DEADLINE = 15.0
PAGE = Path(__file__).resolve().parents[2] / "docs" / "conversations.md"
MARK = "<!-- tested-by: tests/gateway/test_gateway_questions.py -->"


async def clerk_team(team: Team) -> Clerk:
    """A clerk and a gateway serving it."""
    clerk = Clerk(agent_id="clerk-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    await team.add(clerk)
    gateway = await team.serve()
    await wait_until(lambda: "clerk" in gateway.directory.cards, DEADLINE)
    return clerk


def answer(task: a2a.Task, text: str, *, with_context: bool = True) -> a2a.Message:
    """A follow-up message on ``task`` with ``text``."""
    message = user_message(text=text)
    message.task_id = task.id
    if with_context:
        message.context_id = task.context_id
    return message


def asked(task: a2a.Task) -> tuple[str, str, dict[str, object]]:
    """(state, text, question) of a task waiting for input."""
    parts = list(task.status.message.parts)
    (text,) = [part.text for part in parts if part.HasField("text")]
    (data,) = [data_of(part) for part in parts if part.HasField("data")]
    return state_name(task.status.state), text, data["question"]


async def only_task(client: Client, message: a2a.Message) -> a2a.Task:
    """Send ``message`` (blocking); return the task it answers with."""
    (response,) = await send(client, message)
    return response.task


async def test_a_question_waits_for_input_and_follow_ups_answer_it(team: Team) -> None:
    """Input-required with the question; each follow-up answers on the same task, in its
    context; an answer that does not fit is asked again, saying why; then completed."""
    await clerk_team(team)
    async with sdk_client(f"{team.url}/agents/clerk", KEY) as client:
        task = await only_task(client, user_message({"who": "ann"}, skill="book"))
        state, text, question = asked(task)
        assert (state, text) == ("TASK_STATE_INPUT_REQUIRED", "Where to, ann?")
        assert question["service"] == "clerk"
        assert question["answer_schema"] == {"type": "string"}
        assert question["context_id"] == task.context_id  # the A2A context is the bus's

        second = await only_task(client, answer(task, "Oslo"))
        assert second.id == task.id
        state, text, question = asked(second)
        assert (state, text) == ("TASK_STATE_INPUT_REQUIRED", "How many nights in Oslo?")
        assert question["answer_schema"] == {"type": "integer"}

        refused = await only_task(client, answer(task, "a few"))
        state, text, question = asked(refused)
        assert state == "TASK_STATE_INPUT_REQUIRED"
        assert text.startswith("How many nights in Oslo? (the last answer did not fit: answer:")
        assert question["rejected"]["answer"] == "a few"

        done = await only_task(client, answer(task, "2"))
        assert state_name(done.status.state) == "TASK_STATE_COMPLETED"
        assert (
            done.artifacts[0].parts[0].text
            == f"booked 2 nights in Oslo for ann in {task.context_id}"
        )
        stored = await client.get_task(a2a.GetTaskRequest(id=task.id))
    assert state_name(stored.status.state) == "TASK_STATE_COMPLETED"
    said = [part.text or str(data_of(part)) for m in stored.history for part in m.parts]
    assert said[0] == str({"who": "ann"})
    assert {"Oslo", "a few", "2"} <= set(said)
    assert len(team.gateway.open_tasks) == 0  # type: ignore[union-attr]


async def test_a_follow_up_without_a_context_keeps_the_tasks(team: Team) -> None:
    """A follow-up naming only the task (the SDK would give it a new context) goes on in
    the task's context; a data part is the answer as it is."""
    await clerk_team(team)
    async with sdk_client(f"{team.url}/agents/clerk", KEY) as client:
        task = await only_task(client, user_message({"who": "bo"}, skill="book"))
        await only_task(client, answer(task, "Rome", with_context=False))
        follow_up = user_message({"nights": 3})
        follow_up.task_id = task.id
        refused = await only_task(client, follow_up)  # an object for an integer: asked again
        assert asked(refused)[2]["rejected"]["answer"] == {"nights": 3}
        done = await only_task(client, answer(task, "3", with_context=False))
    assert done.context_id == task.context_id
    assert done.artifacts[0].parts[0].text.endswith(f"for bo in {task.context_id}")


async def test_streaming_sees_the_question_and_the_answer_goes_on_streaming(team: Team) -> None:
    """SendStreamingMessage ends at input-required; the answer, streamed too, completes it."""
    await clerk_team(team)
    async with sdk_client(f"{team.url}/agents/clerk", KEY, streaming=True) as client:
        first = await send(client, user_message({"who": "cy"}, skill="book"))
        last = first[-1].status_update
        assert state_name(last.status.state) == "TASK_STATE_INPUT_REQUIRED"
        task = await client.get_task(a2a.GetTaskRequest(id=last.task_id))
        await send(client, answer(task, "Lima"))
        events = await send(client, answer(task, "1"))
    states = [
        state_name(e.status_update.status.state) for e in events if e.HasField("status_update")
    ]
    assert states == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    (artifact,) = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert artifact.parts[0].text.startswith("booked 1 nights in Lima for cy")


async def test_an_auth_question_is_auth_required(team: Team) -> None:
    """A question of kind auth: auth-required; the follow-up's text is the token."""
    await clerk_team(team)
    async with sdk_client(f"{team.url}/agents/clerk", KEY) as client:
        task = await only_task(client, user_message({"who": "di"}, skill="sign_in"))
        assert asked(task)[:2] == ("TASK_STATE_AUTH_REQUIRED", "A token for di, please")
        done = await only_task(client, answer(task, "t0k3n"))
    assert done.artifacts[0].parts[0].text == "di signed in with t0k3n"


async def test_a_message_on_a_task_that_asks_nothing_is_refused(team: Team) -> None:
    """A follow-up on a finished task, or one still working, is refused (-32004): nothing
    is sent on the bus."""
    calc = Calc(agent_id="calc-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    await team.add(calc)
    gateway = await team.serve()
    await wait_until(lambda: "calc" in gateway.directory.cards, DEADLINE)
    async with sdk_client(f"{team.url}/agents/calc", KEY) as client:
        done = await only_task(client, user_message({"n": 2}, skill="double"))
        with pytest.raises(UnsupportedOperationError, match="TASK_STATE_COMPLETED"):
            await send(client, answer(done, "3"))
        (working,) = await send(
            client, user_message({"seconds": 30}, skill="slow"), return_immediately=True
        )
        await wait_until(lambda: len(calc.seen) == 2, DEADLINE)
        with pytest.raises(UnsupportedOperationError, match="it asks none now"):
            await send(client, answer(working.task, "3"))
        await client.cancel_task(a2a.CancelTaskRequest(id=working.task.id))
    assert [skill for skill, _ in calc.seen] == ["double", "slow"]


async def test_cancelling_a_task_that_waits_declines_its_question(team: Team) -> None:
    """CancelTask on a task waiting for input: canceled, and the agent is told no answer
    comes (its ``ask`` raises ``QuestionDeclined``); the question takes no answer after."""
    clerk = await clerk_team(team)
    async with sdk_client(f"{team.url}/agents/clerk", KEY) as client:
        task = await only_task(client, user_message({"who": "ed"}, skill="book"))
        question = asked(task)[2]
        cancelled = await client.cancel_task(a2a.CancelTaskRequest(id=task.id))
        assert state_name(cancelled.status.state) == "TASK_STATE_CANCELED"
        await wait_until(lambda: clerk.declined == ["ed"], DEADLINE)
    with pytest.raises(QuestionClosed) as closed:
        await team.client.answer(str(question["question_id"]), "Oslo", timeout=10)
    assert closed.value.details["reason"] == "answered"


def page_block(mark: str) -> str:
    """The Python block under ``mark`` in docs/conversations.md."""
    found = re.search(re.escape(mark) + r"\s*```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    assert found is not None, f"docs/conversations.md has no block marked {mark}"
    return found[1]


async def run_block(code: str, name: str) -> tuple[str, dict[str, Any]]:
    """Run ``code`` as a module with top-level await; return what it printed, its names."""
    compiled = compile(code, f"<{name}>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    names: dict[str, Any] = {"__name__": name}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        ran = eval(compiled, names)  # the page's own code, as a reader runs it
        if inspect.iscoroutine(ran):
            await ran
    return printed.getvalue(), names


async def test_the_pages_a2a_client_answers_the_pages_clerk(team: Team) -> None:
    """docs/conversations.md, "From an A2A client", runs as written against the clerk of
    "Ask, from a skill", through a gateway with the page's key."""
    _, skill_page = await run_block(page_block("<!-- doc-test: ask-in-a-skill -->"), "clerk_page")
    clerk = skill_page["Clerk"](
        agent_id="clerk-1", settings=team.settings, heartbeat_interval=HEARTBEAT
    )
    await team.add(clerk)
    gateway = await team.serve(ApiKeys.from_mapping({"a-long-random-key-for-alice": "alice"}))
    await wait_until(lambda: "clerk" in gateway.directory.cards, DEADLINE)
    code = page_block(MARK).replace("http://localhost:8080", team.url)
    printed, _ = await run_block(code, "a2a_page")
    assert printed.splitlines() == [
        "TASK_STATE_INPUT_REQUIRED",
        "Where to, ann?",
        "Book 2 nights in Oslo?",
        "booked 2 nights in Oslo for ann",
    ]
