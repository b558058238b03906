"""The CLI's one-shot commands: ``plan run``, ``agents``, ``request`` and ``publish``."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from typing import Any

import click
from pydantic import TypeAdapter, ValidationError

from agentbus._exceptions import AgentBusError, RemoteError
from agentbus.bus import QuestionHandler
from agentbus.cli._answers import answerer, converse, loose_json
from agentbus.cli._context import (
    client_bus,
    client_id_option,
    error_text,
    load_json,
    print_json,
    read_bytes,
    run_async,
)
from agentbus.cli._output import write_out
from agentbus.cli._render import (
    agents_table,
    aggregate_report,
    plan_state_report,
    progress_text,
)
from agentbus.envelopes import BROADCAST, EnvelopeError, EventEnvelope, ResponseEnvelope, decode
from agentbus.leader import (
    Plan,
    PlanClient,
    PlanState,
    PlanStatus,
    Progress,
    SubtaskOutcome,
    SubtaskStatus,
)

__all__ = ["agents", "plan", "publish", "request"]

_PLAN_EXIT = {PlanStatus.COMPLETED: 0, PlanStatus.PARTIAL: 1, PlanStatus.FAILED: 2}
_WATCH_LOOK = 5.0  # seconds between looks at a watched plan, should an event be missed
_WATCH_SETTLE = 0.2


@click.group()
def plan() -> None:
    """Submit plans to a leader."""


@plan.command("run")
@click.argument("file", metavar="FILE|-")
@click.option("--json", "as_json", is_flag=True, help="Print the aggregate as JSON.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=600.0, show_default=True)
@click.option("--leader", "leader_service", default="leader", show_default=True)
@click.option("--quiet", "-q", is_flag=True, help="No live progress lines.")
@click.option(
    "--answer",
    "answers",
    multiple=True,
    metavar="JSON",
    help="An answer to a question a step asks, in order (repeat it for each).",
)
@client_id_option
@click.pass_context
@run_async
async def plan_run(
    ctx: click.Context,
    file: str,
    as_json: bool,
    timeout: float,
    leader_service: str,
    quiet: bool,
    answers: tuple[str, ...],
) -> None:
    """Run the plan in FILE on a leader, showing live progress; print the aggregate.

    A step that asks (its agent's question, or an approval step) is answered with the
    next --answer, else at a prompt when standard input is a terminal; else its question
    is shown with the command that answers it (`agentbus answer`, from anywhere), and the
    plan waits for it, within --timeout.

    The exit status is 0 when the plan completed, 1 when it was partial, 2 when it failed,
    and 3 when it could not run (an invalid plan, no leader, no broker).
    """
    try:
        document = load_json(file if file == "-" else f"@{file}", "the plan")
        parsed = Plan.model_validate(document)
    except click.BadParameter as exc:
        raise _CouldNotRun(exc.message) from exc
    except ValidationError as exc:
        raise _CouldNotRun(f"invalid plan: {_first_error(exc)}") from exc
    try:
        async with client_bus(ctx) as bus:
            client = PlanClient(bus, leader=leader_service)
            progress = None if quiet else _show_progress
            aggregate = await client.run(
                parsed, timeout=timeout, on_progress=progress, on_question=answerer(answers)
            )
    except AgentBusError as exc:
        raise _CouldNotRun(error_text(exc)) from exc
    if as_json:
        print_json(aggregate.model_dump(mode="json"))
    else:
        write_out(aggregate_report(aggregate) + "\n")
    ctx.exit(_PLAN_EXIT[aggregate.status])


@plan.command("answer")
@click.argument("question_id")
@click.argument("value", metavar="ANSWER", required=False)
@click.option("--decline", is_flag=True, help="Decline to answer.")
@click.option("--leader", "leader_service", default="leader", show_default=True)
@client_id_option
@click.pass_context
@run_async
async def plan_answer(
    ctx: click.Context, question_id: str, value: str | None, decline: bool, leader_service: str
) -> None:
    """Answer the question QUESTION_ID a plan's step waits on (`plan status` lists them).

    ANSWER is JSON (text that is not JSON goes as a string); an approval step takes
    true, false, or {"approved": true, "note": "..."}. The plan goes on; what the leader
    says is printed. An answer to a question no plan waits on says why (exit 3).
    """
    if (value is None) == (not decline):
        raise click.UsageError("give either ANSWER or --decline")
    async with client_bus(ctx) as bus:
        try:
            said = await PlanClient(bus, leader=leader_service).answer(
                question_id, None if value is None else loose_json(value), decline=decline
            )
        except AgentBusError as exc:
            raise _CouldNotRun(error_text(exc)) from exc
    print_json(said)


@plan.command("status")
@click.argument("plan_id")
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
@click.option("--leader", "leader_service", default="leader", show_default=True)
@client_id_option
@click.pass_context
@run_async
async def plan_status(ctx: click.Context, plan_id: str, as_json: bool, leader_service: str) -> None:
    """Show where the plan PLAN_ID is: each subtask while it runs, the aggregate once ended.

    The exit status is that of `plan run` for an ended plan, 4 while it runs, and 3 when
    no leader knows it.
    """
    state = await _state_of(ctx, plan_id, leader_service)
    if as_json:
        print_json(state.model_dump(mode="json"))
    else:
        write_out(plan_state_report(state) + "\n")
    ctx.exit(4 if state.aggregate is None else _PLAN_EXIT[state.aggregate.status])


@plan.command("watch")
@click.argument("plan_id")
@click.option("--leader", "leader_service", default="leader", show_default=True)
@client_id_option
@click.pass_context
@run_async
async def plan_watch(ctx: click.Context, plan_id: str, leader_service: str) -> None:
    """Follow the plan PLAN_ID's progress live until it ends, then print its report.

    Works from any client, also one that did not submit the plan (its progress is
    broadcast). The exit status is that of `plan run`; 3 when no leader knows the plan.
    """
    ended = asyncio.Event()

    def show(progress: Progress) -> None:
        _show_progress(progress)
        if progress.done == progress.total:
            ended.set()

    async with client_bus(ctx) as bus:
        client = PlanClient(bus, leader=leader_service)
        await client.watch(plan_id, show)  # first: nothing between the look and the watch
        state = await _look(client, plan_id)
        while state.aggregate is None:
            click.echo(f"{plan_id}: {state.done}/{state.total} done, on {state.leader}", err=True)
            if ended.is_set():  # its leader files the aggregate just after the last step
                await asyncio.sleep(_WATCH_SETTLE)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ended.wait(), timeout=_WATCH_LOOK)
            state = await _look(client, plan_id)
    write_out(aggregate_report(state.aggregate) + "\n")
    ctx.exit(_PLAN_EXIT[state.aggregate.status])


async def _state_of(ctx: click.Context, plan_id: str, leader_service: str) -> PlanState:
    async with client_bus(ctx) as bus:
        return await _look(PlanClient(bus, leader=leader_service), plan_id)


async def _look(client: PlanClient, plan_id: str) -> PlanState:
    try:
        return await client.status(plan_id)
    except AgentBusError as exc:
        raise _CouldNotRun(error_text(exc)) from exc


class _CouldNotRun(click.ClickException):
    exit_code = 3

    def show(self, file: Any = None) -> None:
        click.echo(f"agentbus: error: {self.message}", err=True)


def _show_progress(progress: Progress) -> None:
    agent = f" on {progress.agent_id}" if progress.agent_id else ""
    error = f": {progress.error.get('message')}" if progress.error else ""
    what = progress.transition
    if progress.detail is not None:
        what = progress_text(progress.transition, progress.detail)
    click.echo(
        f"[{progress.done}/{progress.total}] {progress.subtask_id} ({progress.skill}) "
        f"{what}{agent}{error}",
        err=True,
    )


async def _request_task(
    ctx: click.Context,
    service: str,
    action: str,
    parameters: dict[str, Any] | None,
    timeout: float,
    result_only: bool,
    task_id: str | None,
) -> None:
    task_id = task_id or f"task-{uuid.uuid4().hex[:12]}"
    click.echo(f"task {task_id} (look it up: agentbus plan status {task_id})", err=True)
    async with client_bus(ctx) as bus:
        try:
            aggregate = await PlanClient(bus).run_task(
                service,
                action,
                parameters,
                task_id=task_id,
                timeout=timeout,
                on_progress=_show_progress,
            )
        except RemoteError as exc:
            print_json(exc.envelope.model_dump(mode="json"))
            ctx.exit(1)
    (outcome,) = aggregate.subtasks
    if result_only:
        print_json(outcome.result)
    else:
        print_json(TypeAdapter(SubtaskOutcome).dump_python(outcome, mode="json"))
    ctx.exit(0 if outcome.status is SubtaskStatus.SUCCEEDED else 1)


def _show_update(update: ResponseEnvelope) -> None:
    result = update.payload.result if isinstance(update.payload.result, dict) else {}
    state = str(result.get("state", "started"))
    click.echo(f"{update.sender_id}: {progress_text(state, result)}", err=True)


def _first_error(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


@click.command()
@click.option("--service", help="Only agents of this service.")
@click.option("--status", type=click.Choice(["ready", "busy", "draining", "offline"]))
@click.option("--skill", help="Only agents offering this skill.")
@click.option("--all", "include_offline", is_flag=True, help="Include agents gone offline.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=5.0, show_default=True)
@client_id_option
@click.pass_context
@run_async
async def agents(
    ctx: click.Context,
    service: str | None,
    status: str | None,
    skill: str | None,
    include_offline: bool,
    as_json: bool,
    timeout: float,
) -> None:
    """List the agents the registry knows: id, service, status, load, skills, last seen."""
    filters = {"service": service, "status": status, "skill": skill}
    parameters: dict[str, Any] = {k: v for k, v in filters.items() if v is not None}
    if include_offline or status == "offline":
        parameters["include_offline"] = True
    async with client_bus(ctx) as bus:
        reply = await bus.request("registry", "list_agents", parameters, timeout=timeout)
    rows: list[dict[str, Any]] = reply.result
    if as_json:
        print_json(rows)
    else:
        write_out(agents_table(rows) + "\n")


@click.command()
@click.argument("receiver")
@click.argument("action")
@click.option("--params", "-p", metavar="JSON|@FILE|-", help="Request parameters (an object).")
@click.option("--timeout", type=click.FloatRange(min=0.01), default=30.0, show_default=True)
@click.option("--result", "result_only", is_flag=True, help="Print only the result.")
@click.option(
    "--task",
    "as_task",
    is_flag=True,
    help="Ask through a leader, as a task whose status `agentbus plan status ID` shows.",
)
@click.option("--task-id", help="The task's id (with --task; default: made up).")
@click.option(
    "--answer",
    "answers",
    multiple=True,
    metavar="JSON",
    help="An answer to a question the skill asks, in order (repeat it for each).",
)
@click.option("--context", "context_id", metavar="ID", help="The conversation's id.")
@click.option(
    "--answer-within",
    type=click.FloatRange(min=0.001),
    metavar="SECONDS",
    help="How long a question of this request may wait for its answer.",
)
@client_id_option
@click.pass_context
@run_async
async def request(
    ctx: click.Context,
    receiver: str,
    action: str,
    params: str | None,
    timeout: float,
    result_only: bool,
    as_task: bool,
    task_id: str | None,
    answers: tuple[str, ...],
    context_id: str | None,
    answer_within: float | None,
) -> None:
    """Send ACTION to RECEIVER (an agent id or service) and print the response as JSON.

    The skill's progress and partial results are printed on stderr as they come. An error
    envelope is printed too, and the exit status is then 1.

    A question the skill asks is answered with the next --answer (JSON; text that is not
    JSON goes as a string), else at a prompt when standard input is a terminal; else the
    question is printed as JSON with how to answer it (`agentbus answer`), and the exit
    status is 5.

    With --task the request goes through a leader as a task (a plan of one subtask): its
    id is printed on stderr first, and `agentbus plan status ID` shows it while it runs
    and after it ended, also after this command was stopped. What is printed is the
    subtask's outcome (status, result or error, attempts, agent).
    """
    parameters = load_json(params, "--params")
    if parameters is not None and not isinstance(parameters, dict):
        raise click.BadParameter("--params must be a JSON object")
    if task_id is not None and not as_task:
        raise click.UsageError("--task-id goes with --task")
    if as_task:
        await _request_task(ctx, receiver, action, parameters, timeout, result_only, task_id)
        return
    async with client_bus(ctx) as bus:

        async def ask(on_question: QuestionHandler | None) -> ResponseEnvelope:
            return await bus.request(
                receiver,
                action,
                parameters,
                timeout=timeout,
                on_progress=_show_update,
                on_question=on_question,
                context_id=context_id,
                answer_within=answer_within,
            )

        reply = await converse(ctx, ask, answers)
    if reply is not None:
        print_json(reply.result if result_only else reply.model_dump(mode="json"))


@click.command()
@click.argument("event_name", required=False)
@click.option("--data", "-d", metavar="JSON|@FILE|-", help="Event data (an object).")
@click.option("--to", "receiver", default=BROADCAST, show_default=True, help="Receiver id.")
@click.option(
    "--raw",
    metavar="FILE|-",
    help="Publish a whole envelope read from FILE or standard input instead of an event.",
)
@click.option(
    "--require-listener",
    is_flag=True,
    help="Fail (exit 2) when nobody subscribes to the event, instead of dropping it.",
)
@client_id_option
@click.pass_context
@run_async
async def publish(
    ctx: click.Context,
    event_name: str | None,
    data: str | None,
    receiver: str,
    raw: str | None,
    require_listener: bool,
) -> None:
    """Publish the event EVENT_NAME, or a raw envelope with --raw; print what was sent.

    An event nobody subscribes to is dropped, as pub/sub goes, unless --require-listener.
    A raw request or reply nobody receives is always an error.
    """
    if (event_name is None) == (raw is None):
        raise click.UsageError("give either EVENT_NAME or --raw FILE")
    async with client_bus(ctx) as bus:
        if raw is not None:
            source = sys.stdin.buffer.read() if raw == "-" else read_bytes(raw)
            try:
                envelope = decode(source, max_size=bus.settings.max_message_size)
            except EnvelopeError as exc:
                raise click.BadParameter(f"not a valid envelope: {exc.message}") from exc
            listened = require_listener or not isinstance(envelope, EventEnvelope)
            await bus.publish(envelope, mandatory=listened)
        else:
            assert event_name is not None
            event_data = load_json(data, "--data")
            if event_data is not None and not isinstance(event_data, dict):
                raise click.BadParameter("--data must be a JSON object")
            envelope = await bus.emit(
                event_name, event_data, receiver=receiver, mandatory=require_listener
            )
    print_json(envelope.model_dump(mode="json"))
