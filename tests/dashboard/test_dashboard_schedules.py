"""The schedules view in a real browser: a schedule added shows, its runs come in live."""

from __future__ import annotations

from pathlib import Path

from dashboard_support import DESKTOP, Browser, DashboardProcess, shot
from processes import STARTUP, Processes

from agentbus.leader import PlanClient


async def test_a_schedule_and_its_last_runs_show_live(
    procs: Processes, dashboard: DashboardProcess, browser: Browser, screens: Path
) -> None:
    """A schedule added after the page loaded is listed (the leader's list, asked again on
    ``schedule_changed``); each tick's run shows as ``schedule_fired`` tells it."""
    leader = procs.leader("leader-1")
    await leader.started()
    client = await procs.client()
    page = await browser.new_page(viewport=DESKTOP)
    await page.goto(dashboard.url)
    await page.wait_for_selector("#schedule-list")
    request = {"service": "nobody", "action": "ping"}
    schedule = {"name": "every-second", "every": 1, "request": request}
    await PlanClient(client).add_schedule(schedule, timeout=STARTUP)
    row = '[data-schedule="every-second"]'
    await page.wait_for_selector(row, timeout=20_000)
    runs = f"() => Number(document.querySelector('{row}')?.dataset.runs) >= 2"
    await page.wait_for_function(runs, timeout=20_000)
    text = await page.inner_text(row)
    assert "every 1 s" in text
    assert "every-second-" in text  # a run, named after the schedule and its tick
    await shot(page, screens, "schedules")
    assert await PlanClient(client).remove_schedule("every-second", timeout=STARTUP)
    await page.wait_for_selector(row, state="detached", timeout=20_000)
