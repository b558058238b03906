"""What the dashboard's browser tests share: pages, the dashboard process, screenshots."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processes import AgentProcess, Processes, poll

from agentbus import Bus

STARTUP = 30.0  # s: a process starting (imports, connecting) on a loaded machine
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


@dataclass
class Browser:
    """Opens pages that report their script errors."""

    browser: Any
    errors: list[str]

    async def new_page(self, *, viewport: dict[str, int]) -> Any:
        page = await self.browser.new_page(viewport=viewport)
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        return page


@dataclass
class DashboardProcess:
    """An ``agentbus dashboard`` process and how to reach it."""

    process: AgentProcess
    url: str
    token: str

    def get(self, path: str, *, host: str | None = None) -> tuple[int, bytes]:
        """GET ``path`` (blocking), optionally with another ``Host`` header."""
        request = urllib.request.Request(f"{self.url}{path}")
        if host is not None:
            request.add_header("Host", host)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def state(self) -> dict[str, Any]:
        """The boards, asked with the token (beyond localhost, reading needs it)."""
        request = urllib.request.Request(f"{self.url}api/state")
        request.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(request, timeout=5) as response:
            body: dict[str, Any] = json.load(response)
            return body


async def shot(page: Any, screens: Path, name: str) -> None:
    """Save a full-page screenshot under the test's folder and say where."""
    path = screens / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


async def team(procs: Processes, skill: str) -> Bus:
    """A registry, a leader and a worker; return a client bus once the registry knows the
    worker's ``skill`` (a plan's step finds its agent then)."""
    started = [procs.registry("registry-1"), procs.leader("leader-1")]
    started.append(procs.agent("Worker", "worker-1"))
    for process in started:
        await process.started()
    client = await procs.client()

    async def known() -> bool | None:
        reply = await client.request("registry", "find_skill", {"skill": skill}, timeout=5)
        return True if reply.result else None

    await poll(known, 10, "the registry to know the worker")
    return client
