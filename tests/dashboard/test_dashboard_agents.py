"""The agents view in a real browser: a real team on the real broker, followed live."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from dashboard_support import DESKTOP, PHONE, Browser, DashboardProcess, shot
from processes import INTERVAL, MISSED, SLACK, STARTUP, Processes, within

# Records, in the page, when a row for an agent id first shows (epoch ms), by agent id.
_WATCH_ROWS = """
() => {
  window.__firstSeen = {};
  const look = () => {
    for (const row of document.querySelectorAll("tr[data-agent-id]")) {
      const id = row.dataset.agentId;
      if (!(id in window.__firstSeen)) window.__firstSeen[id] = Date.now();
    }
  };
  new MutationObserver(look).observe(document.body, { childList: true, subtree: true });
  look();
}
"""


def parse(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp)


def row(agent_id: str) -> str:
    return f'tr[data-agent-id="{agent_id}"]'


async def test_agents_join_get_listed_and_go_offline_live(
    procs: Processes, dashboard: DashboardProcess, browser: Browser, screens: Path
) -> None:
    """The page lists the team; a new agent shows within a beat; killed ones turn offline."""
    team = [procs.registry("registry-1"), procs.agent("Alpha", "alpha-1")]
    team.append(procs.agent("Beta", "beta-1"))
    for process in team:
        await process.started()
    page = await browser.new_page(viewport=DESKTOP)
    await page.goto(dashboard.url)
    await page.evaluate("() => { window.__notReloaded = true; }")
    for agent_id in ("registry-1", "alpha-1", "beta-1"):
        await page.wait_for_selector(f'{row(agent_id)}[data-status="ready"]', timeout=10_000)
    alpha = page.locator(row("alpha-1"))
    assert "double" in await alpha.inner_text()  # skills, from the card
    assert "0/8" in await alpha.inner_text()  # in flight against capacity
    await shot(page, screens, "1-team-listed")

    # A new agent: its row shows without a reload, within one heartbeat interval of the
    # first beat it sends (the beat's own timestamp, heard by a feed of the test's).
    first_beat: dict[str, datetime] = {}

    def heard(envelope: dict[str, Any]) -> None:
        first_beat.setdefault(str(envelope.get("sender_id")), parse(envelope["timestamp"]))

    listener = await procs.client()
    await listener.consume_feed("broadcast.event.heartbeat", heard, name="test-beats")
    await page.evaluate(_WATCH_ROWS)
    joining = procs.agent("Alpha", "alpha-2")
    await page.wait_for_selector(row("alpha-2"), timeout=(STARTUP + INTERVAL + SLACK) * 1000)
    await within(SLACK, lambda: "alpha-2" in first_beat, "the test to hear alpha-2's first beat")
    shown = await page.evaluate("() => window.__firstSeen['alpha-2']")
    seconds = shown / 1000 - first_beat["alpha-2"].timestamp()
    print(f"join (first beat sent) -> row visible: {seconds * 1000:.0f} ms")
    assert seconds < INTERVAL + SLACK
    assert await page.evaluate("() => window.__notReloaded === true")
    await page.wait_for_selector('[data-service="alpha"] >> text=2 live', timeout=5_000)
    await shot(page, screens, "2-agent-joined")

    # Killed (no goodbye): offline once its beats have been missed, as the registry judges.
    killed_at = time.monotonic()
    joining.popen.kill()
    await page.wait_for_selector(
        f'{row("alpha-2")}[data-status="offline"]', timeout=(MISSED * INTERVAL + SLACK) * 1000
    )
    print(f"kill -> row offline: {time.monotonic() - killed_at:.2f} s ({MISSED} missed beats)")
    assert await page.get_attribute(row("alpha-1"), "data-status") == "ready"
    await shot(page, screens, "3-agent-offline")

    # Every instance of a service gone: the service is shown as such.
    team[2].popen.kill()
    await page.wait_for_selector(
        '[data-service="beta"][data-gone="true"]', timeout=(MISSED * INTERVAL + SLACK) * 1000
    )
    assert "no live instance" in await page.locator('[data-service="beta"]').inner_text()
    assert await page.evaluate("() => window.__notReloaded === true")
    await shot(page, screens, "4-service-gone")

    # Another name for this machine (DNS rebinding): refused, the team not shown.
    status, _ = await asyncio.to_thread(dashboard.get, "api/state", host="evil.example")
    assert status == 400

    phone = await browser.new_page(viewport=PHONE)
    await phone.goto(dashboard.url)
    await phone.wait_for_selector(row("alpha-1"))
    await shot(phone, screens, "5-phone")


async def test_busy_and_draining_show_as_the_agent_beats_them(
    procs: Processes, dashboard: DashboardProcess, browser: Browser, screens: Path
) -> None:
    """At capacity the row says busy; on SIGTERM with work in hand, draining, then offline."""
    agent = procs.agent("Alpha", "alpha-9", "--concurrency", "1")
    await agent.started()
    client = await procs.client()
    page = await browser.new_page(viewport=DESKTOP)
    await page.goto(dashboard.url)
    await page.wait_for_selector(f'{row("alpha-9")}[data-status="ready"]')

    work = asyncio.create_task(client.request("alpha-9", "slow", {"seconds": 4}, timeout=30))
    await page.wait_for_selector(f'{row("alpha-9")}[data-status="busy"]', timeout=5_000)
    assert "1/1" in await page.locator(row("alpha-9")).inner_text()
    await shot(page, screens, "1-busy")

    agent.popen.terminate()  # drains: finishes the slow request first
    await page.wait_for_selector(f'{row("alpha-9")}[data-status="draining"]', timeout=5_000)
    await shot(page, screens, "2-draining")
    reply = await work
    assert reply.result == "slept 4s"
    await page.wait_for_selector(f'{row("alpha-9")}[data-status="offline"]', timeout=10_000)
    await shot(page, screens, "3-left")
