"""The CLI answers the questions skills ask: from --answer, or it prints the question (exit 5)
and ``agentbus answer`` goes on with it from another command; on the real broker."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from processes import Processes, poll

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


PLAN = {
    "id": "cli-approval",
    "subtasks": [
        {"id": "sq", "skill": "square", "parameters": {"n": 4}},
        {
            "id": "sign-off",
            "skill": "approval",
            "parameters": {"question": "Keep 16?"},
            "inputs": {"square": "sq"},
            "depends_on": ["sq"],
        },
    ],
}


async def test_a_plan_parks_on_its_approval_and_another_command_answers_it(
    procs: Processes, tmp_path: Path
) -> None:
    """`plan run` waits; the plan parks (0.5 s); `plan status` lists the question and
    `plan answer` approves it from another command; the run ends completed."""
    procs.extra_env["AGENTBUS_PLAN_PARK_AFTER"] = "0.5"
    team = (procs.registry("registry-1"), procs.leader("leader-1"), procs.agent("Worker", WORKER))
    for process in team:
        await process.started()
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(PLAN))
    run = await asyncio.create_subprocess_exec(
        *procs.command("plan", "run", str(plan_file), "--json", "--timeout", "60"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=procs.env,
        cwd=procs.workdir,
    )
    try:
        state = await poll(lambda: _waiting(procs), 30, "the plan parked on its question")
        [question] = state["questions"]
        assert question["text"] == "Keep 16?"
        assert question["data"] == {"square": 16}
        said = await procs.cli("plan", "answer", question["question_id"], "true")
        assert said.returncode == 0, said.stderr
        assert json.loads(said.stdout)["accepted"] is True
        async with asyncio.timeout(60):
            out, err = await run.communicate()
    finally:
        if run.returncode is None:
            run.kill()
    assert run.returncode == 0, err.decode()
    aggregate = json.loads(out)
    assert aggregate["status"] == "completed"
    sign_off = next(s for s in aggregate["subtasks"] if s["id"] == "sign-off")
    assert sign_off["result"]["approved"] is True
    assert "asks: Keep 16?" in err.decode()


async def _waiting(procs: Processes) -> dict[str, object] | None:
    done = await procs.cli("plan", "status", "cli-approval", "--json")
    if done.returncode not in (0, 4):
        return None
    state = json.loads(done.stdout)
    return state if state["state"] == "waiting" and state["questions"] else None
