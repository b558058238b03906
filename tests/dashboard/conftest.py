"""Fixtures for the dashboard's browser tests: a team of processes, the dashboard, Chromium.

The team and the broker are the integration tier's (tests/integration/processes.py, on a
fresh exchange per test); the browser is Debian's headless Chromium driven by Playwright
(scripts/ensure-chromium installs it; Playwright's own browsers are never downloaded).
Without Chromium or Playwright the tests skip, and fail under CI.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

_INTEGRATION = str(Path(__file__).resolve().parents[1] / "integration")
if _INTEGRATION not in sys.path:
    sys.path.insert(0, _INTEGRATION)

from dashboard_support import STARTUP, Browser, DashboardProcess  # noqa: E402
from processes import Processes  # noqa: E402

from support.ports import free_port  # noqa: E402
from support.required import missing  # noqa: E402
from support.waiting import eventually  # noqa: E402

# The integration tier's fixtures (exchange_name, make_bus, procs), loaded under another
# name: pytest knows one module called ``conftest`` per directory only.
_spec = importlib.util.spec_from_file_location(
    "integration_conftest", Path(_INTEGRATION) / "conftest.py"
)
assert _spec is not None
assert _spec.loader is not None
_integration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_integration)
exchange_name = _integration.exchange_name
make_bus = _integration.make_bus
procs = _integration.procs


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test here ``dashboard`` (browser) and ``integration`` (broker)."""
    for item in items:
        if f"{os.sep}dashboard{os.sep}" in str(item.path):
            item.add_marker(pytest.mark.dashboard)
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def chromium() -> str:
    """The chromium binary: $AGENTBUS_CHROMIUM, PATH, /usr/bin; else skip (fail under CI)."""
    for candidate in (
        os.environ.get("AGENTBUS_CHROMIUM"),
        shutil.which("chromium"),
        "/usr/bin/chromium",
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    missing(
        "chromium (Debian package chromium) is needed for the dashboard's browser tests; "
        "./scripts/ensure-chromium installs it, or set AGENTBUS_CHROMIUM"
    )
    raise AssertionError("unreachable")


@pytest.fixture
async def browser(chromium: str) -> AsyncIterator[Browser]:
    """A headless Chromium, through Playwright; a script error on any page fails the test."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        missing("playwright is needed for the browser tests: pip install -e '.[dev]'")
    errors: list[str] = []
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            yield Browser(launched, errors)
        finally:
            await launched.close()
    assert not errors, f"script errors on the page: {errors}"


@pytest.fixture
def screens(tmp_path: Path) -> Path:
    """Where a test saves its screenshots (printed, to look at them)."""
    folder = tmp_path / "screens"
    folder.mkdir()
    return folder


async def start_dashboard(procs: Processes, tmp_path: Path, *options: str) -> DashboardProcess:
    """``agentbus dashboard`` on this test's exchange, with a token and ``options``; serving."""
    token = secrets.token_urlsafe(16)
    token_file = tmp_path / "dashboard.token"
    token_file.write_text(token, encoding="utf-8")
    port = free_port()
    agent_id = "dashboard-test"
    process = procs._spawn(
        agent_id,
        "dashboard",
        *("--id", agent_id, "--port", str(port), "--token-file", str(token_file), *options),
    )
    board = DashboardProcess(process, f"http://127.0.0.1:{port}/", token)

    def ready() -> bool | None:
        if not process.running:
            pytest.fail(f"the dashboard exited:\n{process.tail()}", pytrace=False)
        return True if "agents" in board.state() else None

    await eventually(ready, STARTUP, "the dashboard to serve /api/state")
    return board


@pytest.fixture
async def dashboard(procs: Processes, tmp_path: Path) -> DashboardProcess:
    """``agentbus dashboard`` on localhost, with a token (for actions); ready to serve."""
    return await start_dashboard(procs, tmp_path)


@pytest.fixture
async def exposed_dashboard(procs: Processes, tmp_path: Path) -> DashboardProcess:
    """``agentbus dashboard`` listening on every address: reading needs its token too."""
    return await start_dashboard(procs, tmp_path, "--host", "0.0.0.0")
