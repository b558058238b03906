"""The A2A TCK's mandatory category against two gateway processes behind one address.

``agentbus gateway --workers 2 --task-store redis://...``: the TCK's calls are spread over
the two processes by the kernel, so a task one created is read, listed, cancelled and
subscribed to at either, and a follow-up on a task waiting for input (the chatter's) may
reach the other process; every mandatory test the single gateway passes passes here too
(the same left-out lists, the same counts at least).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from gateway_team import Team
from test_a2a_tck import (
    AGENTS,
    AT_LEAST,
    BINDINGS,
    LEFT_OUT,
    OPEN_TASK_NEEDED,
    TCK_KEY,
    outcomes,
    run_tck,
    tck_ready,
)
from test_gateway_cli import AGENTBUS, wait_listed

from support.ports import free_port
from support.redis_servers import tier_redis_url


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with tier_redis_url(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.mark.parametrize("agent", list(AGENTS))
@pytest.mark.parametrize("binding", list(BINDINGS))
async def test_the_tck_passes_against_two_workers_sharing_tasks(
    team: Team, binding: str, agent: str, tmp_path: Path, redis_url: str
) -> None:
    tck_ready()
    await team.add(
        AGENTS[agent](agent_id=f"{agent}-1", settings=team.settings, heartbeat_interval=1.0)
    )
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({TCK_KEY: "tck"}))
    port = free_port()
    # localhost: the TCK takes an IP address in a public card for a leaked internal address.
    process = await asyncio.create_subprocess_exec(
        AGENTBUS, "--url", team.settings.url, "--exchange", team.settings.exchange,
        "--log-level", "error", "gateway", "--keys", str(keys), "--port", str(port),
        "--root-service", agent, "--public-url", f"http://localhost:{port}",
        "--workers", "2", "--task-store", redis_url,
        env={**os.environ, "AGENTBUS_INSTANCE_QUEUE_EXPIRES": "5"},
    )  # fmt: skip
    try:
        await wait_listed(f"http://127.0.0.1:{port}", agent)
        report = tmp_path / "tck.xml"
        left_out = [*LEFT_OUT, *(OPEN_TASK_NEEDED if agent == "shouter" else ())]
        output = await run_tck(f"http://localhost:{port}", BINDINGS[binding], report, left_out)
    finally:
        process.send_signal(signal.SIGTERM)
        await process.wait()
    assert report.is_file(), output[-4000:]
    passed, failed, skipped = outcomes(report)
    print(f"A2A TCK mandatory, {agent}, {binding}, 2 workers: {passed} passed, "
          f"{len(failed)} failed, {skipped} skipped")  # fmt: skip
    assert failed == [], output[-4000:]
    assert passed >= AT_LEAST[agent, binding], output[-4000:]
