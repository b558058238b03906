"""The benchmarks' echo agents and handler, and the SDKs' own servers with no bus:
``_bench_agents.py a2a PORT [--unwrapped]``, ``mcp [--http PORT]``, ``artifact ROLE SIZE [REF]``."""

from __future__ import annotations

import sys
from typing import Any

from agentbus import Agent, RequestEnvelope, ask, skill


async def echo(request: RequestEnvelope) -> Any:
    """A ``Bus.serve`` handler that answers with the request's parameters."""
    return request.payload.parameters


class Echo(Agent):
    """Does no work at all, so a benchmark measures the plumbing around it."""

    name = "echo"
    description = "Echoes a number; sums a list of numbers"
    concurrency = 64

    @skill
    async def echo(self, n: int) -> int:
        """Return ``n``."""
        return n

    @skill
    async def total(self, values: list[int]) -> int:
        """Return the sum of ``values`` (the fan-in step)."""
        return sum(values)

    @skill
    async def numbers(self, count: int) -> list[int]:
        """Return ``[0, ..., count - 1]`` (what a mapped step maps over)."""
        return list(range(count))

    @skill
    async def asks(self, n: int) -> int:
        """Ask the caller how much to add to ``n`` (a question's round trip)."""
        return n + await ask("How much more?", int)


class Pinger(Agent):
    """The request/response suite's Agent side: a typed skill, run as ``agentbus run`` runs it."""

    name = "pinger"
    description = "Answers with its parameters"
    concurrency = 64

    @skill
    async def answer(self, i: int) -> dict[str, int]:
        """Return ``{"i": i}``."""
        return {"i": i}


class UvPinger(Pinger):
    """The Pinger the ``agent-uvloop`` side asks: its own queue, served on uvloop."""

    name = "pinger-uv"


def a2a_server(port: int, unwrapped: bool) -> None:
    import uvicorn
    from a2a.helpers import new_task
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types import a2a_pb2 as a2a
    from starlette.applications import Starlette

    class Executor(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
            history = [context.message] if context.message is not None else []
            await event_queue.enqueue_event(new_task(updater.task_id, updater.context_id,
                                                     a2a.TaskState.TASK_STATE_SUBMITTED,
                                                     history=history))  # fmt: skip
            await updater.start_work()
            parts = list(context.message.parts) if context.message is not None else []
            await updater.add_artifact(parts, name="echo")
            await updater.complete()

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()

    interface = a2a.AgentInterface(url=f"http://127.0.0.1:{port}/", protocol_binding="JSONRPC",
                                   protocol_version="1.0")  # fmt: skip
    card = a2a.AgentCard(
        name="echo", description="echo", version="1", supported_interfaces=[interface],
        capabilities=a2a.AgentCapabilities(streaming=True),
        default_input_modes=["application/json"], default_output_modes=["application/json"],
        skills=[a2a.AgentSkill(id="echo", name="echo", description="echo", tags=["echo"])],
    )  # fmt: skip
    handler = DefaultRequestHandler(agent_executor=Executor(), task_store=InMemoryTaskStore(),
                                    agent_card=card)  # fmt: skip
    app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])
    if unwrapped:
        from agentbus.gateway._sdk_tracing import unwrap

        unwrap()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")


def mcp_server(args: list[str]) -> None:
    from mcp.server import MCPServer

    server = MCPServer("echo")

    @server.tool(name="echo__echo")
    def echo(n: int) -> int:
        """Return ``n`` (named as agentbus mcp names the Echo agent's skill)."""
        return n

    if args[:1] == ["--http"]:
        server.run(transport="streamable-http", host="127.0.0.1", port=int(args[1]))
    else:
        server.run()


if __name__ == "__main__":
    if sys.argv[1] == "artifact":
        from _suite_features import artifact_end

        artifact_end(sys.argv[2], int(sys.argv[3]), sys.argv[4] if sys.argv[4:] else None)
    elif sys.argv[1] == "a2a":
        a2a_server(int(sys.argv[2]), "--unwrapped" in sys.argv[3:])
    else:
        mcp_server(sys.argv[2:])
