"""The CLI answers the questions skills ask: from --answer, or it prints the question (exit 5)
and ``agentbus answer`` goes on with it from another command; on the real broker."""

from __future__ import annotations

import json

import pytest
from processes import Processes

pytestmark = pytest.mark.integration

WORKER = "worker-1"


async def test_request_answers_from_answer_options_and_a_bad_answer_is_asked_again(
    procs: Processes,
) -> None:
    """--answer values are used in order; one that does not fit is refused and asked again."""
    await procs.agent("Worker", WORKER).started()

    done = await procs.cli(
        "request", "worker", "power", "-p", '{"n": 2}', "--answer", "9", "--answer", "3", "--result"
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == 8
    assert "the answer 9 was refused" in done.stderr


async def test_a_question_left_open_is_printed_and_answered_by_agentbus_answer(
    procs: Processes,
) -> None:
    """No answer and no terminal: the question as JSON, exit 5; `agentbus answer` ends it."""
    await procs.agent("Worker", WORKER).started()

    asked = await procs.cli("request", "worker", "power", "-p", '{"n": 5}')

    assert asked.returncode == 5, asked.stderr
    question = json.loads(asked.stdout)["input_required"]
    assert question["text"] == "Which power of 5?"
    assert f"agentbus answer {question['question_id']}" in asked.stderr

    answered = await procs.cli("answer", question["question_id"], "2", "--result")
    assert answered.returncode == 0, answered.stderr
    assert json.loads(answered.stdout) == 25

    again = await procs.cli("answer", question["question_id"], "3")
    assert again.returncode == 2
    assert "answered already" in again.stderr
