"""The README and the site's pages (docs/) run as written: each code block is run here, by a
named test, or is marked illustrative with a reason (doc_blocks.py says how blocks are marked).

Shell blocks run line by line from the repository root, against the test broker on a
fresh exchange (``AGENTBUS_URL`` and ``AGENTBUS_EXCHANGE`` in the environment, the venv's
``bin`` first on ``PATH``): a line ending in ``&`` starts a process, ``kill %...`` sends
SIGTERM to those and expects each to exit 0, and any other line must exit 0, tried again
for a while as a user would while the team starts. Python blocks run with top-level await.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json
import os
import runpy
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from doc_blocks import ROOT, Block, all_blocks, named

import agentbus
from agentbus import Settings
from agentbus.bus import Topology
from agentbus.leader import Plan, Schedule
from agentbus.registry import Registry
from support.broker import delete_topology

pytestmark = pytest.mark.docs

RUNNERS = {
    "envelope-example",
    "team-by-hand",
    "agent-in-15-lines",
    "answer-from-python",
    "ask-in-a-skill",
    "bus-from-python",
    "essay-plan",
    "essay-team",
    "plan-cli",
    "plan-python",
    "shaped-plan",
    "sync-questions",
    "sync-script",
    "sync-web-views",
    "schedule-example",
    "schedule-cli",
    "schedule-python",
}
"""The doc-test names this module runs; every one marks a block (or the same one on two pages)."""
SERVICES = ("registry", "leader", "greeter", "outliner", "drafter", "summarizer", "clerk")
RETRY_FOR = 20.0  # seconds a foreground line may take to succeed while the team starts
STOP_WITHIN = 20.0  # seconds a SIGTERMed process has to exit


def test_every_block_is_run_tested_or_marked_illustrative() -> None:
    """No block goes unaccounted for: a runner here, a test module, or a stated reason."""
    found = [block for block in all_blocks() if block.lang != "text"]  # figures, not code
    unmarked = [block.where for block in found if block.kind is None]
    assert not unmarked, f"blocks without a doc-test/tested-by/illustrative marker: {unmarked}"
    missing = [
        f"{block.where} -> {block.value}"
        for block in found
        if block.kind == "tested-by" and not (ROOT / str(block.value)).exists()
    ]
    assert not missing, f"tested-by names a file that does not exist: {missing}"
    names = {block.value for block in found if block.kind == "doc-test"}
    assert names == RUNNERS, "each doc-test name marks a block, and runs here"
    for name in RUNNERS:
        named(name)  # a name on two pages marks the same text on both


@dataclass
class Shell:
    """A shell block's run: what each foreground line printed, the background processes."""

    env: dict[str, str]
    logs: Path
    outputs: list[subprocess.CompletedProcess[str]] = field(default_factory=list)
    background: list[subprocess.Popen[bytes]] = field(default_factory=list)

    async def run(
        self, block: Block, before_kill: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        for line in block.text.splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            if words[0] == "kill":
                if before_kill is not None:
                    await before_kill()
                await self.stop()
            elif words[-1] == "&":
                self.start(words[:-1])
            else:
                self.outputs.append(await self.until_ok(words))

    def start(self, argv: list[str]) -> None:
        log = self.logs / f"{len(self.background)}-{Path(argv[-1]).name}.log"
        with log.open("wb") as out:
            self.background.append(
                subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT)
            )

    async def until_ok(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        deadline = time.monotonic() + RETRY_FOR
        while True:
            done = await asyncio.to_thread(
                subprocess.run, argv, cwd=ROOT, env=self.env, capture_output=True, text=True,
                timeout=120, check=False,
            )  # fmt: skip
            if done.returncode == 0:
                return done
            if time.monotonic() > deadline:
                pytest.fail(f"{shlex.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
            await asyncio.sleep(0.5)

    async def stop(self) -> None:
        for process in self.background:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.background:
            code = await asyncio.to_thread(process.wait, STOP_WITHIN)
            assert code == 0, f"{shlex.join(map(str, process.args))} exited {code}"  # type: ignore[arg-type]

    def kill_all(self) -> None:
        for process in self.background:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture
async def exchange(broker_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """A fresh exchange, named in the environment for the commands and snippets run here."""
    name = f"docs-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("AGENTBUS_URL", broker_url)
    monkeypatch.setenv("AGENTBUS_EXCHANGE", name)
    yield name
    # Its queues and streams (the journals, the schedules' lease, the conversations): by
    # name now, and what the commands left that no one can name at the session's end.
    topology = Topology(name)
    await delete_topology(broker_url, name, {topology.service_queue(s) for s in SERVICES})


@pytest.fixture
def shell(exchange: str, tmp_path: Path) -> Iterator[Shell]:
    """Runs shell blocks; whatever a failed test left running is killed."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["AGENTBUS_LOG_FORMAT"] = "json"
    runner = Shell(env, tmp_path)
    yield runner
    runner.kill_all()


async def run_python(block: Block, **names: Any) -> str:
    """Run a Python block with top-level await; return what it printed."""
    code = compile(block.text, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        result = eval(code, {"__name__": "docs_block", **names})
        if asyncio.iscoroutine(result):
            await result
    return printed.getvalue()


def test_envelope_example_is_a_valid_request() -> None:
    """The envelope page's example decodes to the request it says: greet, for ann."""
    envelope = agentbus.decode(named("envelope-example").text.encode())
    assert isinstance(envelope, agentbus.RequestEnvelope)
    assert (envelope.receiver_id, envelope.payload.action) == ("greeter", "greet")
    assert envelope.payload.parameters == {"who": "ann"}


async def test_team_by_hand(shell: Shell) -> None:
    """Getting started: a registry, a leader and a greeter by hand; the request is answered."""
    await shell.run(named("team-by-hand"))
    request = shell.outputs[-1]
    assert json.loads(request.stdout)["payload"]["result"] == {"text": "hello, ann!", "length": 11}


async def test_agent_in_15_lines(broker_url: str, exchange: str) -> None:
    """The README's (and the guide's) 15-line agent runs and answers with its typed result."""
    namespace: dict[str, Any] = {"__name__": "docs_block"}
    code = compile(named("agent-in-15-lines").text, "agent", "exec")
    exec(code, namespace)
    settings = Settings(url=broker_url, exchange=exchange)
    async with namespace["Greeter"](settings=settings), agentbus.connect(settings=settings) as bus:
        reply = await bus.request("greeter", "greet", {"who": "ann", "shout": True}, timeout=10)
    assert reply.result == {"text": "HELLO, ANN!", "length": 11}


async def test_ask_in_a_skill_and_answer_from_python(broker_url: str, exchange: str) -> None:
    """Conversations: the page's Clerk asks; its Python block answers both ways, as shown."""
    namespace: dict[str, Any] = {"__name__": "docs_block"}
    exec(compile(named("ask-in-a-skill").text, "ask", "exec"), namespace)
    settings = Settings(url=broker_url, exchange=exchange)
    async with namespace["Clerk"](settings=settings), agentbus.connect(settings=settings) as bus:
        names = {"agentbus": agentbus, "bus": bus}
        printed = await run_python(named("answer-from-python"), **names)
        reply = await bus.request("clerk", "book", {"who": "bo"}, on_question=_refusing, timeout=10)
    assert printed.splitlines() == [
        "Where to, ann?",
        "Book 2 nights in Oslo?",
        "Book 2 nights in Oslo?",
        "booked 2 nights in Oslo for ann",
    ]
    assert reply.result == "not booked"


async def _refusing(question: agentbus.Question) -> object:
    return {"city": "Rome", "nights": 1} if question.turn == 0 else False


async def test_bus_from_python(broker_url: str, exchange: str) -> None:
    """The bus: its Python block, against a running greeter (its URL made the test's)."""
    greeter = runpy.run_path(str(ROOT / "examples" / "greeter.py"))["Greeter"]
    block = named("bus-from-python")
    text = block.text.replace("amqp://guest:guest@localhost:5672/", broker_url)
    offline: list[Any] = []

    async def on_offline(event: Any) -> None:
        offline.append(event)

    async with greeter(settings=Settings(url=broker_url, exchange=exchange)):
        printed = await run_python(
            Block(block.path, block.line, block.lang, text, block.kind, block.value),
            on_offline=on_offline,
        )
    assert printed.strip() == "{'text': 'hello, ann!', 'length': 11}"


def test_the_shaped_plan_is_valid_and_maps_as_it_says() -> None:
    """Run plans: the shaped plan validates; its map, conditions and inputs are as shown."""
    plan = Plan.model_validate(json.loads(named("shaped-plan").text))
    analyze = next(s for s in plan.subtasks if s.id == "analyze")
    assert analyze.map is not None
    assert (analyze.map.over, analyze.map.as_, analyze.map.items) == (
        "list.*.path",
        "path",
        "optional",
    )
    assert [s.id for s in plan.subtasks if s.when] == ["summarise", "report"]


def test_essay_plan_is_the_shipped_file() -> None:
    """Run plans: the page's plan is examples/essay.json, valid as a Plan."""
    shown = json.loads(named("essay-plan").text)
    assert shown == json.loads((ROOT / "examples" / "essay.json").read_text())
    Plan.model_validate(shown)


async def test_essay_team_runs_the_plan_from_the_cli_and_python(shell: Shell) -> None:
    """Run plans: the essay team by hand; its plan from the CLI (both ways) and from Python."""

    async def while_up() -> None:
        await shell.run(named("plan-cli"))
        plan = Plan.model_validate_json((ROOT / "examples" / "essay.json").read_text())
        printed = await run_python(named("plan-python"), plan=plan, agentbus=agentbus)
        assert "transition" in printed or "succeeded" in printed  # progress, as printed

    await shell.run(named("essay-team"), before_kill=while_up)
    report = shell.outputs[0].stdout  # essay-team's `agentbus plan run examples/essay.json`
    assert "completed" in report
    aggregate = json.loads(shell.outputs[-1].stdout)  # plan-cli's `--json`
    assert aggregate["status"] == "completed"
    results = {subtask["id"]: subtask["result"] for subtask in aggregate["subtasks"]}
    assert results["outline"]["sections"] == ["What bees are", "How bees work", "Why bees matter"]
    assert results["draft"].startswith("## What bees are\n\n")
    assert results["summary"]["sections"] == 3


# The blocking client (docs/guides/sync-client.md): its blocks run in threads of their own,
# as a script's or a web server's would, while the team runs on the test's loop.


@contextlib.asynccontextmanager
async def greeting_team(settings: Settings) -> AsyncIterator[None]:
    """A registry, a leader and examples/greeter.py's greeter, in this process."""
    greeter = runpy.run_path(str(ROOT / "examples" / "greeter.py"))["Greeter"]
    async with (
        Registry(settings=settings, heartbeat_interval=0.5),
        agentbus.Leader(settings=settings, heartbeat_interval=0.5),
        greeter(settings=settings),
    ):
        yield


def run_blocking(block: Block, **names: Any) -> tuple[list[str], dict[str, Any]]:
    """Run a block of blocking code here (a thread); return its printed lines and names."""
    printed: list[str] = []

    def collect(*values: object) -> None:  # print, for this block alone
        printed.append(" ".join(str(value) for value in values))

    namespace: dict[str, Any] = {"__name__": "docs_block", "print": collect, **names}
    exec(compile(block.text, block.where, "exec"), namespace)
    return printed, namespace


async def test_sync_client_from_a_script(broker_url: str, exchange: str) -> None:
    """The guide's script: a call and a task, with what the page says they print."""
    async with greeting_team(Settings(url=broker_url, exchange=exchange)):
        printed, _ = await asyncio.to_thread(run_blocking, named("sync-script"))
    assert printed == ["{'text': 'hello, ann!', 'length': 11}", "completed hello, bo!"]


def _serve_views(block: Block) -> tuple[list[Any], list[str], dict[str, Any]]:
    _, views = run_blocking(block)
    try:
        with ThreadPoolExecutor(8) as pool:  # the web server's threads
            greeted = list(pool.map(views["greet"], ["ann", "bo", "cy", "di"] * 4))
        task_id = views["start_greeting"]("ed")["task_id"]
        states: list[str] = []
        deadline = time.monotonic() + 20
        while not states or states[-1] != "ended":
            assert time.monotonic() < deadline, f"the task did not end: {states}"
            found = views["greeting"](task_id)
            states.append(found["state"])
            time.sleep(0.02)
        return greeted, states, found
    finally:
        views["bus"].close()


async def test_sync_client_in_web_views(broker_url: str, exchange: str) -> None:
    """The guide's views, called from a pool of threads: each greets; a task is fired, then
    looked up by its id until it has ended."""
    async with greeting_team(Settings(url=broker_url, exchange=exchange)):
        greeted, states, found = await asyncio.to_thread(_serve_views, named("sync-web-views"))
    assert [g["text"] for g in greeted] == [f"hello, {w}!" for w in ["ann", "bo", "cy", "di"] * 4]
    assert set(states) <= {"queued", "running", "ended"}
    assert found == {"state": "ended", "result": {"text": "hello, ed!", "length": 10}}


async def test_sync_client_answers_questions(broker_url: str, exchange: str) -> None:
    """The guide's questions block, on the conversations page's Clerk: answered in the
    calling thread, and later with answer()."""
    namespace: dict[str, Any] = {"__name__": "docs_block"}
    exec(compile(named("ask-in-a-skill").text, "ask", "exec"), namespace)
    settings = Settings(url=broker_url, exchange=exchange)

    def converse() -> list[str]:
        with agentbus.SyncBus(settings=settings) as bus:
            printed, _ = run_blocking(named("sync-questions"), agentbus=agentbus, bus=bus)
        return printed

    async with namespace["Clerk"](settings=settings):
        printed = await asyncio.to_thread(converse)
    assert printed == [
        "Where to, ann?",
        "Book 2 nights in Oslo?",
        "booked 2 nights in Oslo for ann",
        "Book 1 nights in Rome?",
        "booked 1 nights in Rome for bo",
    ]


def test_schedule_example_is_a_valid_schedule() -> None:
    """Schedules: the page's schedule is one (a cron in Paris, a plan)."""
    schedule = Schedule.model_validate(json.loads(named("schedule-example").text))
    assert (schedule.cron, schedule.tz, schedule.plan is not None) == (
        "30 2 * * *",
        "Europe/Paris",
        True,
    )


async def test_schedules_from_the_cli_and_python(shell: Shell, broker_url: str) -> None:
    """Schedules: added, listed and removed from the CLI as shown; then from Python."""

    async def while_up() -> None:
        settings = Settings(url=broker_url, exchange=shell.env["AGENTBUS_EXCHANGE"])
        async with agentbus.connect(settings=settings) as bus:
            printed = await run_python(named("schedule-python"), agentbus=agentbus, bus=bus)
        assert printed.splitlines()[0].startswith("greet-bo next at ")

    await shell.run(named("schedule-cli"), before_kill=while_up)
    listing = next(out.stdout for out in shell.outputs if "NAME" in out.stdout)
    assert "greet-ann" in listing
    assert "cron '30 2 * * *' Europe/Paris" in listing
    assert [out.stdout.strip() for out in shell.outputs[-2:]] == [
        "greet-ann: removed",
        "nightly: removed",
    ]
