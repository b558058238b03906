"""The blocking client: agentbus from plain threads, on the in-memory bus.

One ``SyncBus`` owns a loop in a thread of its own; the agents of each test are started
on that loop (``run_async``), so the client's bus and theirs share the memory broker.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentbus import (
    Agent,
    BusClosed,
    InputRequired,
    Leader,
    Question,
    QuestionDeclined,
    RemoteError,
    Settings,
    SyncBus,
    Unroutable,
    UsageError,
    ask,
    report_progress,
    skill,
)
from agentbus.bus import BusState, Transport
from agentbus.envelopes import EventEnvelope, ResponseEnvelope
from agentbus.leader import PlanStatus, Progress, SubtaskStatus
from agentbus.registry import Registry
from agentbus.testing import MemoryBroker, MemoryBus

BEAT = 0.2


class Echo(Agent):
    name = "echo"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.release = asyncio.Event()

    @skill
    async def say(self, text: str) -> str:
        """Return ``text``."""
        return text

    @skill
    async def hold(self) -> str:
        """Wait until the test lets go."""
        await self.release.wait()
        return "let go"

    @skill
    async def count(self, to: int) -> int:
        """Report each step, then return ``to``."""
        for n in range(to):
            await report_progress((n + 1) / to, f"step {n + 1}")
        return to

    @skill
    async def pick(self) -> str:
        """Ask red or blue."""
        colour: str = await ask("Red or blue?")
        return f"picked {colour}"

    @skill
    async def fail(self) -> None:
        """Fail."""
        raise ValueError("broken on purpose")


@dataclass
class Team:
    """A client on the memory broker, and the agents started on its loop."""

    client: SyncBus
    broker: MemoryBroker
    agents: dict[str, Agent] = field(default_factory=dict)

    def serve(self, *kinds: str) -> None:
        """Start agents (``echo``, ``registry``, ``leader``) on the client's loop."""

        async def start(_: Transport) -> None:
            for kind in kinds:
                agent = _build(kind, MemoryBus(self.broker, agent_id=f"{kind}-1"))
                await agent.start()
                self.agents[kind] = agent

        self.client.run_async(start)

    def release(self) -> None:
        """Let the echo agent's ``hold`` calls return."""
        echo = self.agents["echo"]
        assert isinstance(echo, Echo)

        async def let_go(_: Transport) -> None:
            echo.release.set()

        self.client.run_async(let_go)

    def stop(self) -> None:
        """Stop the agents (the client stays open)."""

        async def stop(_: Transport) -> None:
            for agent in reversed(self.agents.values()):
                await agent.stop(grace=0)

        self.client.run_async(stop)
        self.agents.clear()


def _build(kind: str, bus: MemoryBus) -> Agent:
    if kind == "registry":
        return Registry(bus=bus, heartbeat_interval=BEAT)
    if kind == "leader":
        return Leader(bus=bus, heartbeat_interval=BEAT)
    return Echo(bus=bus, heartbeat_interval=BEAT)


@pytest.fixture
def broker() -> MemoryBroker:
    return MemoryBroker()


@pytest.fixture
def team(broker: MemoryBroker) -> Iterator[Team]:
    """An open client on the memory broker; its agents stop before it closes."""
    with SyncBus(transport=lambda: MemoryBus(broker)) as client:
        team = Team(client, broker)
        yield team
        if client.is_open:
            team.stop()


def _until(condition: Callable[[], bool], within: float = 5.0) -> None:
    """Poll ``condition`` (a state the test cannot be told of) until it holds."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.01)


# The lifecycle.


def test_the_constructor_does_no_io_and_repr_shows_each_state(broker: MemoryBroker) -> None:
    """Nothing is built or started before open; repr says new, open, closed."""
    built: list[MemoryBus] = []
    threads = threading.active_count()

    def transport() -> MemoryBus:
        built.append(MemoryBus(broker))
        return built[-1]

    bus = SyncBus(transport=transport)
    assert (built, threading.active_count(), bus.agent_id) == ([], threads, None)
    assert repr(bus) == "<SyncBus new calls=0>"
    with bus:
        assert bus.state is BusState.OPEN
        assert bus.is_open
        assert len(built) == 1
        assert built[0].is_open
        assert repr(bus) == f"<SyncBus open agent_id={built[0].agent_id!r} calls=0>"
    assert bus.state is BusState.CLOSED
    assert not built[0].is_open
    assert repr(bus).startswith("<SyncBus closed")
    assert threading.active_count() == threads  # the loop's thread has ended


def test_open_twice_is_a_usage_error_and_a_closed_client_stays_closed(
    broker: MemoryBroker,
) -> None:
    """One open per client; after close, every call and open raise BusClosed."""
    bus = SyncBus(transport=lambda: MemoryBus(broker)).open()
    with pytest.raises(UsageError):
        bus.open()
    with bus:  # entering an open client keeps it, and leaving closes it
        pass
    bus.close()  # twice is fine
    with pytest.raises(BusClosed):
        bus.open()
    with pytest.raises(BusClosed):
        bus.request("echo", "say", {"text": "hi"})
    never = SyncBus(transport=lambda: MemoryBus(broker))
    with pytest.raises(BusClosed):
        never.call("echo", "say")  # never opened
    never.close()
    assert never.state is BusState.CLOSED


def test_a_failed_open_raises_here_and_the_client_may_open_again(broker: MemoryBroker) -> None:
    """The transport's error reaches the opener; the next open tries afresh."""
    attempts: list[int] = []

    def transport() -> MemoryBus:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionRefusedError("no broker yet")
        return MemoryBus(broker)

    bus = SyncBus(transport=transport)
    with pytest.raises(ConnectionRefusedError):
        bus.open()
    assert bus.state is BusState.NEW
    with bus:
        assert bus.is_open
    assert len(attempts) == 2


def test_a_transport_excludes_the_connection_arguments(broker: MemoryBroker) -> None:
    """Either a transport or what connects one: both is a configuration error."""
    from agentbus import ConfigurationError

    with pytest.raises(ConfigurationError):
        SyncBus("amqp://localhost/", transport=lambda: MemoryBus(broker))
    assert SyncBus(settings=Settings()).state is BusState.NEW


# Requests, events, questions.


def test_request_call_and_submit_return_what_the_agent_answered(team: Team) -> None:
    """The envelope, its result alone, or a future of the envelope."""
    client = team.client
    team.serve("echo")
    reply = client.request("echo", "say", {"text": "hi"}, timeout=5)
    assert isinstance(reply, ResponseEnvelope)
    assert reply.result == "hi"
    assert client.call("echo", "say", {"text": "ho"}, timeout=5) == "ho"
    future = client.submit("echo", "say", {"text": "later"}, timeout=5)
    assert future.result(5).result == "later"


def test_errors_are_agentbus_exceptions_raised_in_the_calling_thread(team: Team) -> None:
    """A failed skill is a RemoteError, nobody serving is Unroutable: here, not on the loop."""
    client = team.client
    team.serve("echo")
    with pytest.raises(RemoteError) as failed:
        client.call("echo", "fail", timeout=5)
    assert "broken on purpose" in str(failed.value)
    with pytest.raises(Unroutable):
        client.call("nobody", "anything", timeout=5)
    with pytest.raises(RemoteError):
        client.submit("echo", "fail", timeout=5).result(5)


def test_sixteen_threads_at_once_each_get_their_own_answers(team: Team) -> None:
    """One client shared by a thread pool: every call is answered, and to its caller."""
    client = team.client
    team.serve("echo")

    def calls(worker: int) -> list[str]:
        return [
            client.call("echo", "say", {"text": f"{worker}-{n}"}, timeout=10) for n in range(25)
        ]

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(calls, range(16)))
    assert answers == [[f"{worker}-{n}" for n in range(25)] for worker in range(16)]
    assert client._thread.calls == 0  # none left behind


def test_emit_publishes_an_event_a_subscriber_gets(team: Team) -> None:
    """emit returns the envelope sent; a subscription made with run_async receives it."""
    client = team.client
    got: list[EventEnvelope] = []
    arrived = threading.Event()

    async def on_event(event: EventEnvelope) -> None:
        got.append(event)
        arrived.set()

    client.run_async(lambda bus: bus.subscribe("broadcast.event.ping", on_event))
    sent = client.emit("ping", {"n": 1})
    assert arrived.wait(5)
    assert got[0].message_id == sent.message_id
    assert got[0].payload.event_data == {"n": 1}


def test_progress_and_questions_are_handled_in_the_calling_thread(team: Team) -> None:
    """Callbacks run in the thread that waits, in order: never on the client's loop."""
    client = team.client
    team.serve("echo")
    here = threading.get_ident()
    seen: list[tuple[int, Any]] = []

    def on_progress(reply: ResponseEnvelope) -> None:
        seen.append((threading.get_ident(), reply.result))

    assert client.call("echo", "count", {"to": 2}, timeout=5) == 2
    client.request("echo", "count", {"to": 3}, on_progress=on_progress, timeout=5)
    fractions = [r["fraction"] for _, r in seen if isinstance(r, dict) and "fraction" in r]
    assert fractions == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert {thread for thread, _ in seen} == {here}

    def on_question(question: Question) -> str:
        assert threading.get_ident() == here
        return "blue" if question.text == "Red or blue?" else "?"

    assert client.call("echo", "pick", on_question=on_question, timeout=5) == "picked blue"


def test_a_question_left_open_is_answered_from_another_thread(team: Team) -> None:
    """Without on_question: InputRequired, then answer() from anywhere finishes the work."""
    client = team.client
    team.serve("echo")
    with pytest.raises(InputRequired) as asked:
        client.request("echo", "pick", timeout=5)
    with ThreadPoolExecutor(1) as other:
        reply = other.submit(client.answer, asked.value.question.question_id, "red").result(10)
    assert reply.result == "picked red"


def test_a_declined_question_and_a_failing_callback_reach_the_caller(team: Team) -> None:
    """QuestionDeclined declines (the skill is cancelled); another error is raised here."""
    client = team.client
    team.serve("echo")

    def decline(question: Question) -> str:
        raise QuestionDeclined("no")

    with pytest.raises(RemoteError) as declined:
        client.call("echo", "pick", on_question=decline, timeout=5)
    assert declined.value.code == "cancelled"

    def broken(question: Question) -> str:
        raise LookupError("no answer here")

    with pytest.raises(LookupError):
        client.call("echo", "pick", on_question=broken, timeout=5)

    def progress_fails(reply: ResponseEnvelope) -> None:
        raise KeyError("bad progress")

    with pytest.raises(KeyError):
        client.request("echo", "count", {"to": 3}, on_progress=progress_fails, timeout=5)
    assert client.call("echo", "say", {"text": "still fine"}, timeout=5) == "still fine"


def test_a_cancelled_submit_stops_waiting(team: Team) -> None:
    """future.cancel() cancels the request on the loop; nothing is left waiting."""
    client = team.client
    team.serve("echo")
    future = client.submit("echo", "hold", timeout=30)
    assert future.cancel()
    assert future.cancelled()
    team.release()
    assert client.call("echo", "say", {"text": "next"}, timeout=5) == "next"
    assert client._thread.calls == 0


def test_the_calling_threads_context_goes_with_each_call(team: Team) -> None:
    """A context variable set in the caller (a log binding, a span) is set on the loop."""
    client = team.client
    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

    async def read(_: Transport) -> str:
        return request_id.get()

    def in_a_view(name: str) -> str:
        request_id.set(name)
        return client.run_async(read)

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(in_a_view, ["a", "b", "c", "d"])) == ["a", "b", "c", "d"]
    assert client.run_async(read) == "-"


def test_a_blocking_call_from_the_clients_own_loop_is_refused(team: Team) -> None:
    """It would wait on itself forever: a UsageError instead, for a call or a close."""
    client = team.client

    async def inside(_: Transport) -> Any:
        return client.call("echo", "say")

    with pytest.raises(UsageError, match="wait on itself"):
        client.run_async(inside)

    async def close_inside(_: Transport) -> None:
        client.close()

    with pytest.raises(UsageError, match="wait on itself"):
        client.run_async(close_inside)
    assert client.is_open


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_client_used_after_a_fork_is_refused_in_the_child(team: Team) -> None:
    """The loop's thread is not in a forked child: a call there fails, it does not hang."""
    client = team.client
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what the call raised, and leave at once
        try:
            client.call("echo", "say", timeout=1)
            os.write(write, b"no error")
        except UsageError:
            os.write(write, b"UsageError")
        except BaseException as exc:
            os.write(write, type(exc).__name__.encode())
        try:
            client.close()  # the child's copy only: the loop is the parent's
            os.write(write, f", {client.state.value}".encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as pipe:
        assert pipe.read() == b"UsageError, closed"
    assert client.is_open  # the parent's client is untouched


# Closing while calls wait.


def test_close_fails_every_waiting_call_with_bus_closed(team: Team) -> None:
    """Blocked threads and submitted futures alike get BusClosed; the agent is untouched."""
    client = team.client
    team.serve("echo")
    pending = [client.submit("echo", "hold", timeout=30) for _ in range(3)]
    outcomes: list[BaseException | None] = []

    def blocked() -> None:
        try:
            client.call("echo", "hold", timeout=30)
            outcomes.append(None)
        except BaseException as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=blocked) for _ in range(4)]
    for thread in threads:
        thread.start()
    _until(lambda: client._thread.calls == 7)
    team.stop()  # the agent on the client's loop goes first; the calls wait on
    client.close()
    for thread in threads:
        thread.join(5)
    assert [type(outcome) for outcome in outcomes] == [BusClosed] * 4
    for future in pending:
        assert isinstance(future.exception(5), BusClosed)
    assert client.state is BusState.CLOSED


# Plans and tasks.


PLAN: dict[str, Any] = {
    "id": "sync-plan",
    "subtasks": [
        {"id": "first", "skill": "say", "service": "echo", "parameters": {"text": "one"}},
        {
            "id": "ok",
            "skill": "approval",
            "parameters": {"question": "Go on?"},
            "depends_on": ["first"],
        },
        {
            "id": "second",
            "skill": "say",
            "service": "echo",
            "parameters": {"text": "two"},
            "depends_on": ["ok"],
        },
    ],
}


def test_run_plan_answers_its_approval_and_reports_progress_in_this_thread(team: Team) -> None:
    """The plan's question and its progress come to this thread; the aggregate is returned."""
    client = team.client
    team.serve("registry", "leader", "echo")
    here = threading.get_ident()
    transitions: list[tuple[str, str]] = []
    threads: set[int] = set()

    def on_progress(progress: Progress) -> None:
        threads.add(threading.get_ident())
        transitions.append((progress.subtask_id, progress.transition))

    def on_question(question: Question) -> Any:
        threads.add(threading.get_ident())
        return {"approved": True, "note": f"{question.subtask_id} ok"}

    aggregate = client.run_plan(PLAN, timeout=20, on_progress=on_progress, on_question=on_question)
    assert aggregate.status is PlanStatus.COMPLETED
    assert aggregate.subtask("second").result == "two"
    assert aggregate.subtask("ok").result["note"] == "ok ok"
    assert ("ok", "input_required") in transitions
    assert ("second", "succeeded") in transitions
    assert threads == {here}


def test_a_plan_question_callback_that_fails_ends_the_wait_with_its_error(team: Team) -> None:
    """As with a request: the callback's exception is raised here, and the client goes on."""
    client = team.client
    team.serve("registry", "leader", "echo")

    def on_question(question: Question) -> Any:
        raise LookupError(f"nobody to ask about {question.subtask_id}")

    with pytest.raises(LookupError, match="nobody to ask about ok"):
        client.run_plan(PLAN | {"id": "sync-plan-3"}, timeout=20, on_question=on_question)
    assert client.call("echo", "say", {"text": "after"}, timeout=5) == "after"


def test_run_task_and_its_status(team: Team) -> None:
    """A task runs to its aggregate; plan_status finds it by the id it was given."""
    client = team.client
    team.serve("registry", "leader", "echo")
    aggregate = client.run_task("echo", "say", {"text": "tasked"}, task_id="t-1", timeout=20)
    assert aggregate.status is PlanStatus.COMPLETED
    assert aggregate.subtask("task").result == "tasked"
    state = client.plan_status("t-1")
    assert state.state == "ended"
    assert state.aggregate == aggregate


def test_submit_task_returns_its_id_at_once_and_the_status_follows_it(team: Team) -> None:
    """As Celery's delay(): the id now, the status while it runs, the aggregate after."""
    client = team.client
    team.serve("registry", "leader", "echo")
    pending = client.submit_task("echo", "hold", timeout=20)
    assert pending.id.startswith("task-")
    assert not pending.done()
    with pytest.raises(TimeoutError):  # not yet: the task runs on
        pending.result(0.05)
    assert repr(pending) == f"<PendingPlan {pending.id} running>"
    _until(lambda: _running(client, pending.id))
    assert pending.status().subtasks[0].status is SubtaskStatus.RUNNING
    team.release()
    aggregate = pending.result(20)
    assert aggregate.subtask("task").result == "let go"
    assert pending.done()
    assert repr(pending) == f"<PendingPlan {pending.id} ended>"
    assert client.plan_status(pending.id).state == "ended"


def _running(client: SyncBus, plan_id: str) -> bool:
    try:
        state = client.plan_status(plan_id, timeout=2)
    except RemoteError:  # the leader has not taken it yet
        return False
    return bool(state.subtasks) and state.subtasks[0].status is SubtaskStatus.RUNNING


def test_submit_plan_and_a_plan_question_answered_by_id_from_another_thread(team: Team) -> None:
    """A submitted plan waits on its approval; its status lists the question; answer() by
    id from another thread lets it end, and result() returns the aggregate."""
    client = team.client
    team.serve("registry", "leader", "echo")
    pending = client.submit_plan(PLAN | {"id": "sync-plan-2"}, timeout=20)
    assert pending.id == "sync-plan-2"
    _until(lambda: bool(_questions(client, pending.id)))
    question = _questions(client, pending.id)[0]
    assert (question.subtask_id, question.text) == ("ok", "Go on?")
    with ThreadPoolExecutor(1) as other:
        other.submit(client.answer, question.question_id, True).result(10)
    assert pending.result(20).status is PlanStatus.COMPLETED


def _questions(client: SyncBus, plan_id: str) -> list[Question]:
    try:
        return client.plan_status(plan_id, timeout=2).questions
    except RemoteError:
        return []
