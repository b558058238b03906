"""The A2A TCK's mandatory category against two gateway processes behind one address.

``agentbus gateway --workers 2 --task-store redis://...``: the TCK's calls are spread over
the two processes by the kernel, so a task one created is read, listed, cancelled and
subscribed to at either; every mandatory test the single gateway passes passes here too
(the same left-out list, the same counts at least).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from gateway_agents import Shouter
from gateway_team import Team
from test_a2a_tck import BINDINGS, TCK_KEY, outcomes, run_tck, tck_ready
from test_gateway_cli import AGENTBUS, wait_listed

from support.ports import free_port
from support.redis_servers import tier_redis_url


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with tier_redis_url(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.mark.parametrize("binding", list(BINDINGS))
async def test_the_tck_passes_against_two_workers_sharing_tasks(
    team: Team, binding: str, tmp_path: Path, redis_url: str
) -> None:
    tck_ready()
    transport, at_least = BINDINGS[binding]
    await team.add(Shouter(agent_id="shouter-1", settings=team.settings, heartbeat_interval=1.0))
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({TCK_KEY: "tck"}))
    port = free_port()
    # localhost: the TCK takes an IP address in a public card for a leaked internal address.
    process = await asyncio.create_subprocess_exec(
        AGENTBUS, "--url", team.settings.url, "--exchange", team.settings.exchange,
        "--log-level", "error", "gateway", "--keys", str(keys), "--port", str(port),
        "--root-service", "shouter", "--public-url", f"http://localhost:{port}",
        "--workers", "2", "--task-store", redis_url,
        env={**os.environ, "AGENTBUS_INSTANCE_QUEUE_EXPIRES": "5"},
    )  # fmt: skip
    try:
        await wait_listed(f"http://127.0.0.1:{port}", "shouter")
        report = tmp_path / "tck.xml"
        output = await run_tck(f"http://localhost:{port}", transport, report)
    finally:
        process.send_signal(signal.SIGTERM)
        await process.wait()
    assert report.is_file(), output[-4000:]
    passed, failed, skipped = outcomes(report)
    print(f"A2A TCK mandatory, {binding}, 2 workers: {passed} passed, {len(failed)} failed, "
          f"{skipped} skipped")  # fmt: skip
    assert failed == [], output[-4000:]
    assert passed >= at_least, output[-4000:]
