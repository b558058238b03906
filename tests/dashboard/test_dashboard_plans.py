"""The plans view in a real browser: subtasks change state live; cancel needs the token."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from dashboard_support import DESKTOP, Browser, DashboardProcess, shot, team
from processes import SLACK, Processes, poll, within

from agentbus import Artifact
from agentbus._exceptions import RemoteError
from agentbus.leader import Aggregate, PlanClient

PLAN_TIMEOUT = 60.0

# Records, in the page, each status every subtask row shows, in order, by subtask id.
_WATCH_SUBTASKS = """
() => {
  window.__statuses = {};
  const look = () => {
    for (const row of document.querySelectorAll("tr[data-subtask-id]")) {
      const seen = (window.__statuses[row.dataset.subtaskId] ||= []);
      if (seen[seen.length - 1] !== row.dataset.status) seen.push(row.dataset.status);
    }
  };
  new MutationObserver(look).observe(document.body, { childList: true, subtree: true });
  look();
}
"""


def subtask(plan_id: str, subtask_id: str, status: str) -> str:
    return f'[data-plan-id="{plan_id}"] tr[data-subtask-id="{subtask_id}"][data-status="{status}"]'


async def test_plan_subtasks_change_state_live(
    procs: Processes, dashboard: DashboardProcess, browser: Browser, screens: Path
) -> None:
    """Running, retrying, succeeded and failed show as they happen; the aggregate at the end."""
    client = await team(procs, "square")
    page = await browser.new_page(viewport=DESKTOP)
    await page.goto(dashboard.url)
    await page.wait_for_selector('tr[data-agent-id="worker-1"]')
    await page.evaluate(_WATCH_SUBTASKS)
    plan = {
        "id": "live-plan",
        "subtasks": [
            {"id": "first", "skill": "square", "parameters": {"n": 3, "delay": 1.5}},
            {
                "id": "second",
                "skill": "square",
                "parameters": {"n": 4, "delay": 1.0},
                "depends_on": ["first"],
            },
            {
                "id": "flaky",
                "skill": "fail",
                "retries": 1,
                "critical": False,
                "depends_on": ["first"],
            },
        ],
    }
    running = asyncio.create_task(PlanClient(client).run(plan, timeout=PLAN_TIMEOUT))
    await page.wait_for_selector(subtask("live-plan", "first", "running"), timeout=10_000)
    # Not started yet, and listed: the dashboard saw the plan go to the leader.
    await page.wait_for_selector(subtask("live-plan", "second", "pending"))
    assert "after first" in await page.locator('tr[data-subtask-id="second"]').inner_text()
    # Which agent runs it shows once the worker says it started.
    await page.wait_for_selector('tr[data-subtask-id="first"]:has-text("worker-1")')
    await shot(page, screens, "1-plan-running")
    aggregate: Aggregate = await running
    print(aggregate.model_dump_json(indent=1, include={"status", "subtasks", "error"}))
    await page.wait_for_selector('[data-plan-id="live-plan"][data-state="finished"]')
    await shot(page, screens, "2-plan-finished")

    statuses = await page.evaluate("() => window.__statuses")
    print(f"statuses seen live: {statuses}")
    assert statuses["first"][-2:] == ["running", "succeeded"]
    assert statuses["second"] == ["pending", "running", "succeeded"]
    assert "retrying" in statuses["flaky"]
    assert statuses["flaky"][-1] == "failed"
    card = await page.locator('[data-plan-id="live-plan"]').inner_text()
    assert aggregate.status.value == "partial"
    assert "partial" in card  # the aggregate the page shows agrees with the leader's

    # Traffic, from the worker's own heartbeats: its requests, the two failures, latency.
    worker = page.locator('tr[data-traffic-service="worker"]')
    await page.wait_for_selector(
        'tr[data-traffic-service="worker"]:has-text("processing_failed 2")', timeout=10_000
    )
    await page.wait_for_function(  # 2 squares and 2 fails answered, told by a later beat
        """() => Number(document.querySelector('tr[data-traffic-service="worker"]')
                 ?.dataset.requests) >= 4""",
        timeout=10_000,
    )
    cells = await worker.locator("td").all_inner_texts()
    print(f"traffic row: {cells}")
    assert cells[5].endswith(("ms", " s"))  # p50
    assert cells[6].endswith(("ms", " s"))  # p99
    await shot(page, screens, "3-traffic")


async def test_a_mapped_step_lists_its_items_under_it_and_a_failed_condition_skips(
    procs: Processes, dashboard: DashboardProcess, browser: Browser, screens: Path
) -> None:
    """A step mapped over 25 numbers: its row says how the items stand, 20 of them follow it,
    marked as items; a branch whose condition fails shows skipped; the plan completes."""
    client = await team(procs, "numbers")
    page = await browser.new_page(viewport=DESKTOP)
    await page.goto(dashboard.url)
    plan = {
        "id": "shaped-plan",
        "subtasks": [
            {"id": "nums", "skill": "numbers", "parameters": {"n": 25}},
            {"id": "sq", "skill": "square", "depends_on": ["nums"],
             "map": {"over": "nums", "as": "n"}},
            {"id": "never", "skill": "square", "parameters": {"n": 1}, "depends_on": ["nums"],
             "when": {"in": [99, {"var": "nums"}]}},
        ],
    }  # fmt: skip
    aggregate: Aggregate = await PlanClient(client).run(plan, timeout=PLAN_TIMEOUT)
    assert aggregate.status.value == "completed"
    await page.wait_for_selector('[data-plan-id="shaped-plan"][data-state="finished"]')
    await page.wait_for_selector(subtask("shaped-plan", "never", "skipped"))
    card = page.locator('[data-plan-id="shaped-plan"]')
    step = await card.locator('tr[data-subtask-id="sq"]').inner_text()
    assert "25 items: 25 succeeded, 20 listed" in step
    items = await card.locator('tr[data-kind="item"]').evaluate_all(
        "rows => rows.map(row => row.dataset.subtaskId)"
    )
    assert items == [f"sq[{i}]" for i in range(20)]
    ids = await card.locator("tr[data-subtask-id]").evaluate_all(
        "rows => rows.map(row => row.dataset.subtaskId)"
    )
    assert ids.index("sq") + 1 == ids.index("sq[0]")  # the items follow their step
    assert "completed" in await card.inner_text()  # 2 ran, 1 skipped on its condition
    await shot(page, screens, "1-shaped-plan")


async def test_cancel_is_refused_without_the_token_and_stops_the_plan_with_it(
    procs: Processes, dashboard: DashboardProcess, browser: Browser, screens: Path
) -> None:
    """Without the token the cancel is refused (401); with it, the running subtasks cancel."""
    client = await team(procs, "square")
    worker = procs.processes[-1]
    page = await browser.new_page(viewport=DESKTOP)
    await page.goto(dashboard.url)
    plan = {
        "id": "to-cancel",
        "subtasks": [
            {"id": "long-1", "skill": "hang", "timeout": 50},
            {"id": "long-2", "skill": "hang", "timeout": 50},
        ],
    }
    running = asyncio.create_task(PlanClient(client).run(plan, timeout=PLAN_TIMEOUT))
    await page.wait_for_selector(subtask("to-cancel", "long-2", "running"), timeout=10_000)
    button = page.locator('[data-plan-id="to-cancel"] button[data-action="cancel"]')
    assert await button.is_disabled()  # read-only until a token is given

    for token in ("", "not-the-token"):
        status = await page.evaluate(
            """async (token) => (await fetch("/api/plans/to-cancel/cancel",
                 {method: "POST", headers: {Authorization: `Bearer ${token}`}})).status""",
            token,
        )
        assert status == 401
    await page.fill("#token", "wrong")
    await page.click("#auth button")
    await page.wait_for_selector("#notice >> text=token refused")
    assert await button.is_disabled()
    await shot(page, screens, "1-cancel-refused")
    assert not running.done()

    await page.fill("#token", dashboard.token)
    await page.click("#auth button")
    await page.wait_for_selector('#auth-state[data-ok="true"]')
    await button.click()
    for subtask_id in ("long-1", "long-2"):
        await page.wait_for_selector(subtask("to-cancel", subtask_id, "cancelled"), timeout=10_000)
    await page.wait_for_selector('[data-plan-id="to-cancel"][data-state="finished"]')
    assert "cancelled by request" in await page.locator('[data-plan-id="to-cancel"]').inner_text()
    with pytest.raises(RemoteError) as caught:
        await running
    assert caught.value.code == "cancelled"
    await within(SLACK, lambda: worker.logged("hang cancelled") is not None, "hang cancelled")
    await shot(page, screens, "2-plan-cancelled")


_DOWNLOAD_DIGEST = """
async (href) => {
  const got = await fetch(href);
  const bytes = await got.arrayBuffer();
  const digest = await crypto.subtle.digest("SHA-256", bytes);
  const hex = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
  return { status: got.status, size: bytes.byteLength, sha256: hex,
           disposition: got.headers.get("content-disposition") };
}
"""


async def test_a_plans_file_is_listed_on_its_card_and_downloads_whole(
    procs: Processes, dashboard: DashboardProcess, browser: Browser, screens: Path
) -> None:
    """A step returns a 3 MB artifact: the plan's card lists the file with its size and step;
    its link downloads it through the dashboard process, and the browser's SHA-256 of the
    bytes is the reference's."""
    maker = procs.agent("Maker", "maker-1")
    client = await team(procs, "square")
    await maker.started()

    async def known() -> bool | None:
        reply = await client.request("registry", "find_skill", {"skill": "make"}, timeout=5)
        return True if reply.result else None

    await poll(known, 10, "the registry to know the maker")
    page = await browser.new_page(viewport=DESKTOP)
    await page.goto(dashboard.url)
    plan = {"id": "file-plan", "subtasks": [
        {"id": "made", "skill": "make", "parameters": {"size": 3_000_000}}]}  # fmt: skip
    aggregate: Aggregate = await PlanClient(client).run(plan, timeout=PLAN_TIMEOUT)
    assert aggregate.status.value == "completed"
    made = Artifact.model_validate(aggregate.subtask("made").result["artifact"])
    item = page.locator(f'[data-plan-id="file-plan"] li[data-artifact-id="{made.id}"]')
    await item.wait_for(timeout=10_000)
    text = await item.inner_text()
    for shown in ("made.bin", "2.9 MiB", "from made"):
        assert shown in text, text
    await shot(page, screens, "1-plan-files")
    href = await item.locator("a").get_attribute("href")
    got = await page.evaluate(_DOWNLOAD_DIGEST, href)
    assert (got["status"], got["size"], got["sha256"]) == (200, 3_000_000, made.sha256)
    assert got["disposition"].startswith("attachment;")
