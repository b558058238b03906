"""A foreign A2A agent for the run-a2a tests: an a2a-sdk server, knowing nothing of agentbus."""

from __future__ import annotations

import asyncio
from typing import Any

from a2a.helpers import get_data_parts, get_text_parts, new_data_part, new_message, new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as a2a
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette


def wordsmith_card(url: str) -> a2a.AgentCard:
    """The card of the Wordsmith agent served at ``url``."""
    skills = [
        a2a.AgentSkill(id=name, name=name, description=text, tags=["words"])
        for name, text in (
            ("reverse", "Reverse the order of the words of a text"),
            ("stats", "Count words and letters of a text"),
            ("wait", "Wait some seconds, saying so first"),
            ("refuse", "Always fail, with a code"),
            ("outline", "A title and three section headings for a topic"),
            ("trip", "Plan a trip: asks which city, then how many nights"),
        )
    ]
    return a2a.AgentCard(
        name="Word smith",
        description="Plays with words",
        version="0.3.0",
        supported_interfaces=[
            a2a.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=a2a.AgentCapabilities(streaming=True),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=skills,
    )


class Wordsmith(AgentExecutor):
    """Executes the Wordsmith's skills; records what it was asked and what was cancelled."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.cancelled: list[str] = []
        self.hold_first_event: asyncio.Event | None = None
        """Set to an event: each task's first event waits for it (the stream names no task)."""
        self.trips: dict[str, dict[str, Any]] = {}
        """What each ``trip`` task was told so far, by task id."""
        self.follow_ups: list[tuple[str, Any]] = []
        """(task id, the answer) of every follow-up message, in order."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        assert context.task_id
        assert context.context_id
        if context.current_task is not None:  # a follow-up: the answer to a trip's question
            await self._trip(context, TaskUpdater(event_queue, context.task_id, context.context_id))
            return
        skill = MessageToDict(context.message.metadata).get("skill", "reverse")
        self.asked.append(skill)
        if self.hold_first_event is not None:
            await self.hold_first_event.wait()
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if context.current_task is None:
            await event_queue.enqueue_event(
                new_task(context.task_id, context.context_id, a2a.TaskState.TASK_STATE_SUBMITTED)
            )
        await updater.start_work()
        text = " ".join(get_text_parts(context.message.parts))
        data: dict[str, Any] = next(iter(get_data_parts(context.message.parts)), {})
        if skill == "reverse":
            await updater.add_artifact([a2a.Part(text=" ".join(reversed(text.split())))])
        elif skill == "stats":
            words = str(data.get("text", text)).split()
            result = {"words": len(words), "letters": sum(len(w) for w in words)}
            await updater.add_artifact([new_data_part(result)])
        elif skill == "outline":
            topic = text or str(data.get("text", ""))
            sections = [f"{topic}: {part}" for part in ("why", "how", "what next")]
            await updater.add_artifact(
                [new_data_part({"title": topic.title(), "sections": sections})]
            )
        elif skill == "trip":
            self.trips[context.task_id] = {"who": text or str(data.get("text", ""))}
            await updater.requires_input(new_message([a2a.Part(text="Which city?")]))
            return
        elif skill == "wait":
            seconds = float(data["seconds"])
            await updater.update_status(
                a2a.TaskState.TASK_STATE_WORKING,
                message=new_message([a2a.Part(text=f"waiting {seconds:g}s")]),
            )
            await asyncio.sleep(seconds)
            await updater.add_artifact([a2a.Part(text="waited")])
        else:
            failure = {"code": "invalid_parameters", "message": "refused, as always"}
            await updater.failed(new_message([new_data_part(failure)]))
            return
        await updater.complete()

    async def _trip(self, context: RequestContext, updater: TaskUpdater) -> None:
        # Which city (text), then how many nights (a data part: its JSON Schema), then done.
        assert context.message is not None
        assert context.task_id
        trip = self.trips[context.task_id]
        texts = get_text_parts(context.message.parts)
        data = get_data_parts(context.message.parts)
        answer: Any = data[0] if data else " ".join(texts)
        self.follow_ups.append((context.task_id, answer))
        await updater.start_work()
        if "city" not in trip:
            trip["city"] = answer
            nights = {"type": "integer", "minimum": 1, "maximum": 30}
            asked = [a2a.Part(text=f"How many nights in {answer}?"), new_data_part(nights)]
            await updater.requires_input(new_message(asked))
            return
        result = f"{trip['who']}: {int(answer)} nights in {trip['city']}"
        await updater.add_artifact([a2a.Part(text=result)])
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id
        assert context.context_id
        self.cancelled.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def wordsmith_app(url: str, executor: Wordsmith) -> Starlette:
    """A Starlette app serving the Wordsmith at ``url`` with the SDK's routes."""
    card = wordsmith_card(url)
    handler = DefaultRequestHandler(
        agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card
    )
    return Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/"))


if __name__ == "__main__":  # a server in a process of its own, for a test to kill
    import sys

    import uvicorn

    port = int(sys.argv[1])
    app = wordsmith_app(f"http://127.0.0.1:{port}/", Wordsmith())
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
