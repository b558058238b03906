"""The essay's Drafter as a plain A2A agent over HTTP: the a2a-sdk alone, no agentbus.

It writes the same Markdown as ``examples.essay:Drafter``, streamed: for each section a
``working`` status saying which, then the section as a chunk appended to one artifact, so
the artifact, once complete, is the whole draft. Put it on the bus with ``run-a2a``:

    python -m examples.a2a_drafter --port 9999 &
    agentbus run-a2a http://127.0.0.1:9999/ &      # the bus service "drafter", skill "draft"

The card carries agentbus's skill-schemas extension (a public URN any A2A agent may
declare), so the bus checks ``draft``'s parameters before a request is sent.
"""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn
from a2a.helpers import get_data_parts, get_text_parts, new_data_part, new_message, new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as a2a
from google.protobuf.struct_pb2 import Struct
from starlette.applications import Starlette

from examples.essay import section

SCHEMAS: dict[str, Any] = {
    "draft": {
        "parameters": {
            "type": "object",
            "properties": {"sections": {"type": "array", "items": {"type": "string"}}},
            "required": ["sections"],
        },
        "result": {"type": "string"},
    }
}


def drafter_card(url: str) -> a2a.AgentCard:
    """The card of the Drafter served at ``url``."""
    schemas = Struct()
    schemas.update(SCHEMAS)
    return a2a.AgentCard(
        name="drafter",
        description="Writes a paragraph under each heading",
        version="1.0.0",
        supported_interfaces=[
            a2a.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=a2a.AgentCapabilities(
            streaming=True,
            extensions=[
                a2a.AgentExtension(
                    uri="urn:agentbus:a2a:skill-schemas:v1",
                    description="JSON Schemas of each skill's parameters and result",
                    params=schemas,
                )
            ],
        ),
        default_input_modes=["application/json", "text/plain"],
        default_output_modes=["text/markdown"],
        skills=[
            a2a.AgentSkill(
                id="draft",
                name="draft",
                description="Markdown: each heading and a paragraph built from its words "
                "(a data part {'sections': [...]}, or a text part, one heading a line)",
                tags=["essay"],
            )
        ],
    )


class DraftExecutor(AgentExecutor):
    """Drafts the sections a message names, one streamed chunk per section."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        assert context.task_id
        assert context.context_id
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if context.current_task is None:
            submitted = a2a.TaskState.TASK_STATE_SUBMITTED
            await event_queue.enqueue_event(
                new_task(context.task_id, context.context_id, submitted)
            )
        headings = _headings(context.message)
        if not headings or not all(isinstance(h, str) and h for h in headings):
            failure = {"code": "invalid_parameters", "message": "no sections to draft"}
            await updater.reject(new_message([new_data_part(failure)]))
            return
        await updater.start_work()
        for index, heading in enumerate(headings):
            note = f"drafting {heading!r} ({index + 1}/{len(headings)})"
            await updater.update_status(
                a2a.TaskState.TASK_STATE_WORKING, message=new_message([a2a.Part(text=note)])
            )
            text = section(heading) if index == 0 else "\n\n" + section(heading)
            await updater.add_artifact(
                [a2a.Part(text=text, media_type="text/markdown")],
                artifact_id="draft",
                name="draft",
                append=index > 0,
                last_chunk=index == len(headings) - 1,
            )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id
        assert context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def _headings(message: a2a.Message) -> list[str]:
    # A data part's non-empty string sections, else one heading a line of the text parts.
    for data in get_data_parts(message.parts):
        sections = data.get("sections") if isinstance(data, dict) else None
        if isinstance(sections, list) and all(isinstance(s, str) and s for s in sections):
            return sections
        return []
    lines = [line.strip() for text in get_text_parts(message.parts) for line in text.splitlines()]
    return [line for line in lines if line]


def drafter_app(url: str) -> Starlette:
    """A Starlette app serving the Drafter at ``url`` with the SDK's routes."""
    card = drafter_card(url)
    handler = DefaultRequestHandler(
        agent_executor=DraftExecutor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    return Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9999)
    arguments = parser.parse_args()
    url = f"http://{arguments.host}:{arguments.port}/"
    uvicorn.run(drafter_app(url), host=arguments.host, port=arguments.port, log_level="warning")


if __name__ == "__main__":
    main()
