"""Questions in a real browser: listed as they are asked, answered by a person in the form
the answer's schema makes; the work goes on, the question leaves; no token, no answer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import DESKTOP, PHONE, Browser, DashboardProcess, shot, team
from processes import Processes

from agentbus import InputRequired
from agentbus.leader import PlanClient

PLAN_TIMEOUT = 60.0


def card(question_id: str) -> str:
    return f'#question-list [data-question-id="{question_id}"]'


async def log_in(page: Any, token: str) -> None:
    """Give the token in the page's header form; actions are allowed from then on."""
    await page.fill("#token", token)
    await page.click("#auth button")
    await page.wait_for_selector('#auth-state[data-ok="true"]')


async def test_a_person_answers_on_the_page_and_the_work_completes(
    procs: Processes, dashboard: DashboardProcess, browser: Browser, screens: Path
) -> None:
    """The question shows who asks and for which request; without the token the answer
    is refused; with it, the number typed in the form is the work's answer: the result
    shows, and the question leaves the list."""
    await procs.agent("Worker", "worker-1").started()
    client = await procs.client()
    page = await browser.new_page(viewport=DESKTOP)
    await page.goto(dashboard.url)
    with pytest.raises(InputRequired) as caught:
        await client.request("worker", "power", {"n": 3}, timeout=10)
    question = caught.value.question
    shown = page.locator(card(question.question_id))
    await shown.wait_for(timeout=10_000)
    text = await shown.inner_text()
    assert "Which power of 3?" in text
    assert f"asked by worker-1 (service worker) · for request {question.request_id}" in text
    assert client.agent_id in text  # who sent the request
    number = shown.locator('input[type="number"]')
    assert (await number.get_attribute("min"), await number.get_attribute("max")) == ("0", "5")
    assert await shown.locator('button[data-action="answer"]').is_disabled()  # read-only

    for token in ("", "not-the-token"):
        status = await page.evaluate(
            """async ([id, token]) => (await fetch(`/api/questions/${id}/answer`, {
                 method: "POST", headers: {Authorization: `Bearer ${token}`,
                 "Content-Type": "application/json"}, body: '{"answer": 2}'})).status""",
            [question.question_id, token],
        )
        assert status == 401
    await shot(page, screens, "1-question-read-only")

    await log_in(page, dashboard.token)
    await number.fill("2")
    await shown.locator('button[data-action="answer"]').click()

    await page.wait_for_selector("#notice >> text=answered: 9")
    await shown.wait_for(state="detached", timeout=10_000)
    row = page.locator(f'tr[data-answered-id="{question.question_id}"]')
    assert await row.get_attribute("data-outcome") == "result"
    assert "token@127.0.0.1" in await row.inner_text()
    assert await page.locator("#questions-empty").is_visible()
    await shot(page, screens, "2-answered")


async def test_a_plans_questions_are_answered_on_the_page_and_the_plan_completes(
    procs: Processes, dashboard: DashboardProcess, browser: Browser, screens: Path
) -> None:
    """A step's agent asks: the page lists the plan's question (not the agent's own);
    then an approval step's form (yes or no, and a note); the plan completes."""
    client = await team(procs, "power")
    page = await browser.new_page(viewport=PHONE)
    await page.goto(dashboard.url)
    await log_in(page, dashboard.token)
    plan = {
        "id": "asking-plan",
        "subtasks": [
            {"id": "pow", "skill": "power", "service": "worker", "parameters": {"n": 2}},
            {
                "id": "sign-off",
                "skill": "approval",
                "parameters": {"question": "Keep it?"},
                "inputs": {"power": "pow"},
                "depends_on": ["pow"],
            },
        ],
    }
    running = asyncio.create_task(PlanClient(client).run(plan, timeout=PLAN_TIMEOUT))
    cards = page.locator("#question-list [data-question-id]")
    await cards.first.wait_for(timeout=10_000)
    await page.wait_for_selector(
        '[data-plan-id="asking-plan"] tr[data-subtask-id="pow"][data-status="input_required"]'
    )
    assert await cards.count() == 1, "the agent's own question is answered through the plan"
    first = await cards.first.inner_text()
    assert "Which power of 2?" in first
    assert "plan asking-plan, step pow" in first
    await shot(page, screens, "1-plan-question-phone")
    await cards.first.locator('input[type="number"]').fill("5")
    await cards.first.locator('button[data-action="answer"]').click()
    await page.wait_for_selector("#notice >> text=the plan's leader took it")

    approval = page.locator('#question-list [data-question-id]:has-text("Keep it?")')
    await approval.wait_for(timeout=10_000)
    assert await cards.count() == 1
    about = await approval.locator("details pre").first.text_content()  # folded: not shown
    assert '"power": 32' in (about or "")
    await approval.locator('select[aria-label="approved"]').select_option(label="yes")
    await approval.locator('input[aria-label="note"]').fill("fine by me")
    await approval.locator('button[data-action="answer"]').click()

    aggregate = await running
    assert aggregate.status.value == "completed"
    assert aggregate.subtask("pow").result == 32
    assert aggregate.subtask("sign-off").result["note"] == "fine by me"
    await approval.wait_for(state="detached", timeout=10_000)
    await page.wait_for_selector('[data-plan-id="asking-plan"][data-state="finished"]')
    await shot(page, screens, "2-plan-completed-phone")
