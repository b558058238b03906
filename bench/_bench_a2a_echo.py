"""The a2a-sdk's own server with an echo executor and no bus: the floor the gateway stands on.

``python bench/_bench_a2a_echo.py PORT [--unwrapped]``: JSON-RPC at
``http://127.0.0.1:PORT/``, served by uvicorn as ``agentbus gateway`` serves (its loop and
HTTP parser: uvloop and httptools when installed). Each message becomes a task with the
gateway's events: submitted, working, an artifact with the message's data, completed. The
SDK's OpenTelemetry wrappers follow ``OTEL_INSTRUMENTATION_A2A_SDK_ENABLED`` (on unless
``false``), as the SDK reads it; ``--unwrapped`` (with it ``false``) also takes the no-op
wrappers out, as the gateway does.
"""

from __future__ import annotations

import sys

import uvicorn
from a2a.helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as a2a
from starlette.applications import Starlette


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        history = [context.message] if context.message is not None else []
        submitted = a2a.TaskState.TASK_STATE_SUBMITTED
        await event_queue.enqueue_event(
            new_task(updater.task_id, updater.context_id, submitted, history=history)
        )
        await updater.start_work()
        parts = list(context.message.parts) if context.message is not None else []
        await updater.add_artifact(parts, name="echo")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def app(port: int) -> Starlette:
    card = a2a.AgentCard(
        name="echo",
        description="echo",
        version="1",
        supported_interfaces=[
            a2a.AgentInterface(
                url=f"http://127.0.0.1:{port}/", protocol_binding="JSONRPC", protocol_version="1.0"
            )
        ],
        capabilities=a2a.AgentCapabilities(streaming=True),
        default_input_modes=["application/json"],
        default_output_modes=["application/json"],
        skills=[a2a.AgentSkill(id="echo", name="echo", description="echo", tags=["echo"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")]
    return Starlette(routes=routes)


if __name__ == "__main__":
    port = int(sys.argv[1])
    if "--unwrapped" in sys.argv[2:]:
        from agentbus.gateway._sdk_tracing import unwrap

        unwrap()
    uvicorn.run(app(port), host="127.0.0.1", port=port, log_level="warning", lifespan="off")
