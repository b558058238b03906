"""One trace spans a plan across processes: the client, the leader, the registry, a worker.

Every process writes its finished spans to one JSON-lines file (AGENTBUS_TRACE_FILE); the
test follows the parent links from the client's request down to each worker's handling.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import Processes

from agentbus import Settings, connect
from agentbus._tracing import disable_tracing, enable_tracing

PLAN = {
    "id": "traced",
    "subtasks": [
        {"id": "a", "skill": "double", "parameters": {"n": 2}},
        {"id": "b", "skill": "double", "depends_on": ["a"], "inputs": {"n": "a"}},
    ],
}


@pytest.fixture
def spans_file(tmp_path: Path) -> Iterator[Path]:
    """Spans of this process and of every process the test starts go to one file."""
    path = tmp_path / "spans.jsonl"
    enable_tracing(trace_file=str(path))
    yield path
    disable_tracing()


def _spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_a_plan_is_one_trace_from_the_client_to_every_worker(
    procs: Processes, spans_file: Path
) -> None:
    """client send -> leader process -> plan step -> leader send -> worker process, linked."""
    procs.extra_env = {"AGENTBUS_TRACING": "1", "AGENTBUS_TRACE_FILE": str(spans_file)}
    started = [
        procs.registry("registry-1"),
        procs.leader("leader-1"),
        procs.agent("Alpha", "alpha-1"),
    ]
    for process in started:
        await process.started()
    settings = Settings(url=procs.url, exchange=procs.exchange)
    async with connect(settings=settings) as client:
        reply = await client.request("leader", "run_plan", {"plan": PLAN}, timeout=30)
    assert reply.result["status"] == "completed"
    await asyncio.to_thread(procs.stop_all)

    spans = _spans(spans_file)
    [root] = [s for s in spans if s["name"] == "send leader" and s["parent_span_id"] is None]
    in_trace = [s for s in spans if s["trace_id"] == root["trace_id"]]
    by_id = {s["span_id"]: s for s in in_trace}

    def parent(span: dict[str, Any]) -> dict[str, Any]:
        return by_id[span["parent_span_id"]]

    [handling] = [s for s in in_trace if s["name"] == "process run_plan"]
    assert (handling["kind"], parent(handling)) == ("consumer", root)
    steps = {
        s["attributes"]["agentbus.subtask.id"]: s
        for s in in_trace
        if s["name"].startswith("plan step")
    }
    assert set(steps) == {"a", "b"}
    doubles = [s for s in in_trace if s["name"] == "process double"]
    assert len(doubles) == 2
    for work in doubles:
        sent = parent(work)
        assert (sent["name"], sent["kind"]) == ("send alpha", "producer")
        step = parent(sent)
        assert step in steps.values()
        assert parent(step) == handling
    # The leader asked the registry who has the skill, inside the same trace.
    assert any(s["name"] == "process find_skill" for s in in_trace)
    assert all(s["status"] != "error" for s in in_trace)
