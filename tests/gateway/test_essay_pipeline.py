"""The mixed pipeline of docs/a2a.md, run as written: the essay chain across the bus and HTTP.

Every part is a process of its own on the real broker: a registry, a leader, the Outliner
and the Summarizer on the bus, the Drafter as an a2a-sdk server put on the bus by
``agentbus run-a2a``; ``agentbus plan run`` runs the plan, then the SDK's client runs it
again from outside through ``agentbus gateway``. Both aggregates must be what the essay
agents make in-process. (Killing the A2A server mid-plan: test_run_a2a.py.)
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from readme_shell import ROOT, readme_commands, until_ok

from agentbus.bus import Topology
from support.broker import delete_topology
from support.ports import free_port

MARK = "<!-- tested-by: tests/gateway/test_essay_pipeline.py -->"
SERVICES = ("registry", "leader", "outliner", "summarizer", "drafter")

if str(ROOT) not in sys.path:  # the examples package, as the block's processes import it
    sys.path.insert(0, str(ROOT))
from examples import essay  # noqa: E402


async def in_process(topic: str) -> tuple[list[str], str, dict[str, Any]]:
    """The essay chain's results, made by the example agents' skills in this process."""
    outline = await essay.Outliner().outline(topic)
    draft = await essay.Drafter().draft(outline.sections)
    digest = await essay.Summarizer().summary(draft)
    return outline.sections, draft, digest.model_dump()


def results(aggregate: dict[str, Any]) -> dict[str, Any]:
    assert aggregate["status"] == "completed", aggregate
    return {subtask["id"]: subtask["result"] for subtask in aggregate["subtasks"]}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A fresh directory with the repository's examples in it, as in a checkout."""
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    return tmp_path


async def test_the_readme_pipeline_runs_across_the_bus_and_http(
    broker_url: str, home: Path
) -> None:
    """plan run on the bus, then the A2A client through the gateway: the same essay."""
    ports = {"9999": str(free_port()), "8080": str(free_port())}
    exchange = f"test-gw-essay-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "AGENTBUS_URL": broker_url,
        "AGENTBUS_EXCHANGE": exchange,
        "AGENTBUS_LOG_LEVEL": "warning",
        "AGENTBUS_INSTANCE_QUEUE_EXPIRES": "5",  # the processes' own queues go soon after them
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    background: list[tuple[str, asyncio.subprocess.Process]] = []
    runs = []
    try:
        for command in readme_commands(MARK):
            line = command
            for shown, port in ports.items():
                line = line.replace(shown, port)
            words = shlex.split(line, comments=True)
            if words[0] == "kill":
                for _, process in background:
                    process.send_signal(signal.SIGTERM)
                async with asyncio.timeout(30):
                    codes = {words: await process.wait() for words, process in background}
                # uvicorn ends the plain A2A server by SIGTERM again, once it has shut down.
                allowed = {name: {0, -signal.SIGTERM} if "a2a_drafter" in name else {0}
                           for name in codes}  # fmt: skip
                assert all(code in allowed[name] for name, code in codes.items()), codes
            elif words[-1] == "&":
                started = await asyncio.create_subprocess_exec(*words[:-1], cwd=home, env=env)
                background.append((" ".join(words[:-1]), started))
            else:
                runs.append(await until_ok(line, home, env, retry_for=60))
    finally:
        for _, process in background:
            if process.returncode is None:
                process.kill()
                await process.wait()
        topology = Topology(exchange)
        await delete_topology(broker_url, exchange, {topology.service_queue(s) for s in SERVICES})
    sections, draft, digest = await in_process("bees")
    planned, through_gateway = runs[1], runs[2]  # after `echo ... > keys.json`

    on_the_bus = results(json.loads(planned.stdout))
    assert on_the_bus == {"outline": {"topic": "bees", "sections": sections},
                          "draft": draft, "summary": digest}  # fmt: skip

    from_outside = results(json.loads(through_gateway.stdout))
    assert from_outside == on_the_bus
    # The drafter's streaming reached the A2A client: its progress, then each section.
    shown = through_gateway.stderr.splitlines()
    drafting = [n for n, line in enumerate(shown) if "draft progress drafting" in line]
    chunks = [n for n, line in enumerate(shown) if line.startswith("  draft.partial: ")]
    assert len(drafting) == len(chunks) == len(sections), through_gateway.stderr
    for heading, progress, chunk in zip(sections, drafting, chunks, strict=True):
        assert progress < chunk  # each section's progress comes before its text
        assert shown[chunk].startswith(f"  draft.partial: ## {heading} This section asks")
    assert chunks == sorted(chunks)
