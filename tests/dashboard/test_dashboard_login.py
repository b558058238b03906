"""Beyond localhost in a real browser: the login page, the team once logged in, logout."""

from __future__ import annotations

from pathlib import Path

from dashboard_support import DESKTOP, Browser, DashboardProcess, shot
from processes import Processes


def row(agent_id: str) -> str:
    return f'tr[data-agent-id="{agent_id}"][data-status="ready"]'


async def test_beyond_localhost_the_team_shows_only_after_logging_in(
    procs: Processes, exposed_dashboard: DashboardProcess, browser: Browser, screens: Path
) -> None:
    """The page sends a stranger to the login page; the token opens the team, live; logout
    closes it again. The session is an HttpOnly, SameSite=Strict cookie the page cannot read."""
    dashboard = exposed_dashboard
    for process in (procs.registry("registry-1"), procs.agent("Alpha", "alpha-1")):
        await process.started()
    page = await browser.new_page(viewport=DESKTOP)

    # A stranger: sent to the login page; the boards' API refuses it too.
    await page.goto(dashboard.url)
    assert page.url == f"{dashboard.url}login"
    assert await page.locator("tr[data-agent-id]").count() == 0
    status = await page.evaluate('async () => (await fetch("/api/state")).status')
    assert status == 401
    await shot(page, screens, "1-login-page")

    await page.fill("#login-token", "not-the-token")
    await page.click("#login button")
    await page.wait_for_selector("#login-error >> text=The token was refused")
    assert page.url == f"{dashboard.url}login"
    await shot(page, screens, "2-token-refused")

    # The token: the team, followed live (the event stream goes with the session).
    await page.fill("#login-token", dashboard.token)
    await page.click("#login button")
    await page.wait_for_url(dashboard.url)
    for agent_id in ("registry-1", "alpha-1"):
        await page.wait_for_selector(row(agent_id), timeout=10_000)
    await page.wait_for_selector('#auth-state[data-ok="true"]')  # one token: actions too
    await page.wait_for_selector("#live[data-state='live']")
    joining = procs.agent("Beta", "beta-1")
    await joining.started()
    await page.wait_for_selector(row("beta-1"), timeout=10_000)
    cookies = await page.context.cookies()
    assert [(c["httpOnly"], c["sameSite"], c["path"]) for c in cookies] == [(True, "Strict", "/")]
    assert await page.evaluate("() => document.cookie") == ""  # out of the script's reach
    assert dashboard.token not in cookies[0]["value"]
    await shot(page, screens, "3-team-after-login")

    # Logout: back to the login page; the team is closed to this browser again.
    await page.click("#logout button")
    await page.wait_for_url(f"{dashboard.url}login")
    await page.goto(dashboard.url)
    assert page.url == f"{dashboard.url}login"
    status = await page.evaluate('async () => (await fetch("/api/events")).status')
    assert status == 401
    await shot(page, screens, "4-logged-out")
