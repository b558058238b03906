"""Run a plan from outside the bus: a plain A2A client (the a2a-sdk's) to the leader's A2A agent.

    python -m examples.a2a_client http://localhost:8080/agents/leader KEY examples/essay.json

It sends the plan to the leader's ``run_plan`` skill through ``agentbus gateway`` with the
SDK's streaming client, prints each streamed update on stderr as it comes (the plan's
transitions, the skills' progress, partial results as artifact chunks), and prints the
aggregate, the task's final artifact, as JSON on stdout. Exits 0 when the plan completed,
1 when the task or the plan did not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
from a2a.client import ClientConfig, create_client
from a2a.helpers import new_data_part, new_message
from a2a.types import a2a_pb2 as a2a
from google.protobuf.json_format import MessageToDict


async def run(url: str, key: str, plan: dict[str, Any]) -> dict[str, Any] | None:
    """Send ``plan`` to the leader at ``url``; print its updates; return the aggregate."""
    message = new_message([new_data_part({"plan": plan})], role=a2a.Role.ROLE_USER)
    message.metadata.update({"skill": "run_plan"})
    aggregate: dict[str, Any] | None = None
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=headers, timeout=300) as http:
        client = await create_client(url, ClientConfig(streaming=True, httpx_client=http))
        async with client:
            request = a2a.SendMessageRequest(message=message)
            async for event in client.send_message(request):
                kind = event.WhichOneof("payload")
                if kind == "status_update":
                    show_status(event.status_update.status)
                elif kind == "artifact_update":
                    artifact = event.artifact_update.artifact
                    values = [part_value(part) for part in artifact.parts]
                    if artifact.name == "run_plan":
                        aggregate = values[0]
                    else:
                        say(f"  {artifact.name}: {short(values)}")
                elif kind == "task" and event.task.artifacts:
                    aggregate = part_value(event.task.artifacts[-1].parts[0])
    return aggregate


def show_status(status: a2a.TaskStatus) -> None:
    """Print a status update: its state, and a plan transition in a line."""
    state = a2a.TaskState.Name(status.state).removeprefix("TASK_STATE_").lower()
    for part in status.message.parts:
        if part.HasField("text"):
            say(f"{state}: {part.text}")
            continue
        data = part_value(part)
        step = data.get("plan_progress") if isinstance(data, dict) else None
        if step is not None and step["transition"] != "partial":  # the chunk is shown
            detail = step.get("detail") or {}
            extra = detail.get("message") or ("" if "chunk" in detail else step.get("agent_id"))
            say(
                f"{state}: [{step['done']}/{step['total']}] {step['subtask_id']} "
                f"{step['transition']} {extra or ''}".rstrip()
            )


def part_value(part: a2a.Part) -> Any:
    """A part's value: its text, or its data as plain JSON."""
    return part.text if part.HasField("text") else plain(MessageToDict(part.data))


def plain(value: Any) -> Any:
    """``value`` with whole numbers as ints (protobuf's Value holds every number as a double)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def short(values: list[Any]) -> str:
    text = " ".join(value if isinstance(value, str) else json.dumps(value) for value in values)
    text = " ".join(text.split())  # one line
    return text if len(text) <= 70 else text[:67] + "..."


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the leader's A2A agent: http://localhost:8080/agents/leader")
    parser.add_argument("key", help="an API key of the gateway's keys file")
    parser.add_argument("plan", type=Path, help="a plan file, e.g. examples/essay.json")
    arguments = parser.parse_args()
    plan = json.loads(arguments.plan.read_text(encoding="utf-8"))
    aggregate = asyncio.run(run(arguments.url, arguments.key, plan))
    if aggregate is None:
        say("the task ended without an aggregate")
        sys.exit(1)
    print(json.dumps(aggregate, indent=2))
    sys.exit(0 if aggregate.get("status") == "completed" else 1)


if __name__ == "__main__":
    main()
