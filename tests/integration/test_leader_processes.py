"""The leader on a real RabbitMQ, with registry, leader and workers as separate OS processes.

Each test starts ``agentbus registry``, ``agentbus leader`` and ``agentbus run
sample_agents:...`` processes (1 s heartbeats, JSON logs under ``tmp_path``) on its own
exchange, submits plans as a user would (the Python ``PlanClient``, ``agentbus plan run``,
``amqp-publish``) and checks the aggregate. Bounds are functional ones with slack for a
shared, noisy machine; nothing sleeps in place of waiting for an event.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Mapping
from typing import Any

import orjson
import pytest
from processes import INTERVAL, SLACK, STARTUP, AgentProcess, Processes, poll, within
from prometheus_client.parser import text_string_to_metric_families

from agentbus import Bus
from agentbus.leader import Aggregate, PlanClient, PlanStatus, Progress, SubtaskStatus
from support.ports import free_port

LEADER = "leader-1"
REGISTRY = "registry-1"
PLAN_TIMEOUT = 60.0  # a bound on any plan here; each finishes in a few seconds when healthy


class Recorder(list[Progress]):
    """Progress events as a PlanClient hands them over."""

    def __call__(self, progress: Progress) -> None:
        self.append(progress)

    def started_on(self, agent_id: str) -> set[str]:
        """Ids of the subtasks reported started on ``agent_id``."""
        return {p.subtask_id for p in self if p.transition == "running" and p.agent_id == agent_id}


async def team(
    procs: Processes, workers: Mapping[str, tuple[str, ...]], *leader_options: str
) -> tuple[Bus, dict[str, AgentProcess]]:
    """Start a registry, a leader and ``workers`` (id: class and options); wait until listed.

    Returns a client bus and the processes by agent id.
    """
    started = {REGISTRY: procs.registry(REGISTRY), LEADER: procs.leader(LEADER, *leader_options)}
    for agent_id, (cls, *options) in workers.items():
        started[agent_id] = procs.agent(cls, agent_id, *options)
    client = await procs.client()
    for process in started.values():
        await process.started()

    async def all_listed() -> bool | None:
        reply = await client.request(REGISTRY, "list_agents", timeout=2)
        listed = {row["agent_id"] for row in reply.result if row["skills"]}
        return True if listed == set(started) else None

    await poll(all_listed, INTERVAL + SLACK, "the registry to list every process")
    return client, started


async def run_plan(
    client: Bus, plan: dict[str, Any], progress: Recorder | None = None
) -> Aggregate:
    """Run ``plan`` on the leader service through a PlanClient; return the aggregate."""
    return await PlanClient(client).run(plan, timeout=PLAN_TIMEOUT, on_progress=progress)


def squares(count: int, prefix: str = "t", **parameters: Any) -> list[dict[str, Any]]:
    """``count`` independent ``square`` subtasks ``<prefix>0``..., squaring 0, 1, ..."""
    return [
        {"id": f"{prefix}{n}", "skill": "square", "parameters": {"n": n, **parameters}}
        for n in range(count)
    ]


def requests_consumed(port: int, agent_id: str) -> float:
    """``agentbus_messages_consumed_total`` of type request for ``agent_id``, from /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "agentbus_messages_consumed_total"
        and sample.labels.get("agent_id") == agent_id
        and sample.labels.get("type") == "request"
    )


def amqp_tool(name: str) -> str:
    """The path of an amqp-tools program (Debian package amqp-tools)."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} (Debian package amqp-tools) is needed", pytrace=False)
    return path


async def test_chain_feeds_each_result_to_the_next_step(procs: Processes) -> None:
    """outline -> draft (outline.sections) -> summary (draft): each step gets the last result."""
    client, _ = await team(procs, {"writer-1": ("Writer",)})
    plan = {
        "id": "chain",
        "subtasks": [
            {"id": "outline", "skill": "outline", "parameters": {"topic": "bees"}},
            {
                "id": "draft",
                "skill": "draft",
                "depends_on": ["outline"],
                "inputs": {"sections": "outline.sections"},
            },
            {
                "id": "summary",
                "skill": "summary",
                "depends_on": ["draft"],
                "inputs": {"text": "draft"},
            },
        ],
    }

    aggregate = await run_plan(client, plan)

    assert aggregate.status is PlanStatus.COMPLETED, aggregate.model_dump_json(indent=2)
    outline, draft, summary = (aggregate.subtask(i) for i in ("outline", "draft", "summary"))
    assert outline.result == {"title": "Bees", "sections": ["bees 0", "bees 1", "bees 2"]}
    assert draft.result == "bees 0. bees 1. bees 2."
    assert summary.result == {"words": 6, "first": "bees 0"}
    assert all(o.attempts == 1 and o.agents == ["writer-1"] for o in (outline, draft, summary))
    assert outline.ended_at is not None
    assert draft.started_at is not None
    assert outline.ended_at <= draft.started_at
    assert draft.ended_at is not None
    assert summary.started_at is not None
    assert draft.ended_at <= summary.started_at


async def test_fan_out_over_three_workers_and_fan_in(procs: Processes) -> None:
    """50 parallel squares over 3 worker processes, summed by a final step: all 3 work."""
    workers = {f"worker-{k}": ("Worker", "--concurrency", "4") for k in range(1, 4)}
    client, _ = await team(procs, workers)
    # A little work per subtask, so that the queue is shared rather than drained by one.
    fan_out = squares(50, delay=0.05)
    plan = {
        "id": "fan",
        "max_parallel": 50,
        "subtasks": [
            *fan_out,
            {
                "id": "sum",
                "skill": "total",
                "depends_on": [s["id"] for s in fan_out],
                "inputs": {"values": [s["id"] for s in fan_out]},
            },
        ],
    }

    aggregate = await run_plan(client, plan)

    served = Counter(agent for o in aggregate.subtasks for agent in o.agents)
    print(f"fan-out of 50 in {aggregate.totals.wall_time:.3f} s; by worker: {dict(served)}")
    assert aggregate.status is PlanStatus.COMPLETED, aggregate.model_dump_json(indent=2)
    assert [aggregate.subtask(f"t{n}").result for n in range(50)] == [n * n for n in range(50)]
    assert aggregate.subtask("sum").result == sum(n * n for n in range(50))
    assert aggregate.totals.agents_used == sorted(workers)
    assert aggregate.totals.succeeded == 51
    assert aggregate.totals.attempts == 51


async def test_sigkilled_worker_subtasks_finish_on_the_survivor(procs: Processes) -> None:
    """A worker SIGKILLed while holding subtasks: they finish on the other; plan completed."""
    client, started = await team(
        procs,
        {
            "worker-victim": ("Worker", "--concurrency", "3"),
            "worker-survivor": ("Worker", "--concurrency", "3"),
        },
    )
    victim = started["worker-victim"]
    plan = {
        "id": "kill",
        "subtasks": [
            {**subtask, "retries": 1, "timeout": 20} for subtask in squares(12, delay=2.0)
        ],
    }
    progress = Recorder()
    running = asyncio.create_task(run_plan(client, plan, progress))

    await within(STARTUP, lambda: bool(progress.started_on("worker-victim")), "work on the victim")
    victim.popen.kill()
    killed = time.monotonic()
    held = progress.started_on("worker-victim")
    aggregate = await running
    took = time.monotonic() - killed

    moved = {o.id for o in aggregate.subtasks if "worker-victim" in o.agents}
    offline = {p.subtask_id for p in progress if p.transition == "retrying"}
    print(f"killed holding {sorted(held)}; plan ended {took:.3f} s later")
    print(f"moved by agent_offline: {sorted(offline)}, by redelivery: {sorted(moved - offline)}")
    print({o.id: (o.attempts, o.agents) for o in aggregate.subtasks})
    assert aggregate.status is PlanStatus.COMPLETED, aggregate.model_dump_json(indent=2)
    assert [aggregate.subtask(f"t{n}").result for n in range(12)] == [n * n for n in range(12)]
    assert moved == progress.started_on("worker-victim")
    assert held <= moved
    for subtask_id in moved:
        outcome = aggregate.subtask(subtask_id)
        assert outcome.attempts == 2, outcome
        assert outcome.agents == ["worker-victim", "worker-survivor"], outcome
    others = [o for o in aggregate.subtasks if o.id not in moved]
    assert all(o.attempts == 1 and o.agents == ["worker-survivor"] for o in others)
    assert aggregate.totals.agents_used == ["worker-survivor", "worker-victim"]
    # Moved on by redelivery or agent_offline, not by waiting out an attempt's timeout.
    assert aggregate.totals.wall_time < 20
    assert not [p for p in progress if p.error and p.error.get("code") == "timeout"]


async def test_non_critical_failure_gives_partial(procs: Processes) -> None:
    """A non-critical failure skips only its dependents; everything else succeeds: partial."""
    client, _ = await team(procs, {"worker-1": ("Worker",)})
    plan = {
        "subtasks": [
            {"id": "ok", "skill": "square", "parameters": {"n": 3}},
            {"id": "bad", "skill": "fail", "critical": False},
            {"id": "after-bad", "skill": "square", "parameters": {"n": 1}, "depends_on": ["bad"]},
            {"id": "after-ok", "skill": "square", "parameters": {"n": 2}, "depends_on": ["ok"]},
        ]
    }

    aggregate = await run_plan(client, plan)

    assert aggregate.status is PlanStatus.PARTIAL, aggregate.model_dump_json(indent=2)
    assert (aggregate.subtask("ok").status, aggregate.subtask("ok").result) == ("succeeded", 9)
    after_ok = aggregate.subtask("after-ok")
    assert (after_ok.status, after_ok.result) == ("succeeded", 4)
    bad = aggregate.subtask("bad")
    assert bad.status is SubtaskStatus.FAILED
    assert bad.error is not None
    assert bad.error["code"] == "processing_failed"
    assert "ValueError: broken" in bad.error["message"]
    assert aggregate.subtask("after-bad").status is SubtaskStatus.SKIPPED
    assert aggregate.error is None


async def test_critical_failure_fails_skips_and_cancels(procs: Processes) -> None:
    """A critical failure: plan failed, dependents skipped, running hang cancelled on the worker."""
    client, started = await team(procs, {"worker-1": ("Worker",)})
    worker = started["worker-1"]
    plan = {
        "subtasks": [
            {"id": "slow", "skill": "hang", "timeout": 30},
            # Fails only once "slow" runs on the worker, so that there is work to cancel.
            {"id": "bad", "skill": "fail", "parameters": {"after_hang": True}},
            {"id": "after", "skill": "square", "parameters": {"n": 1}, "depends_on": ["bad"]},
        ]
    }
    progress = Recorder()

    aggregate = await run_plan(client, plan, progress)
    await within(
        2 * SLACK, lambda: worker.logged("hang cancelled") is not None, "the hang to be cancelled"
    )

    assert aggregate.status is PlanStatus.FAILED, aggregate.model_dump_json(indent=2)
    assert aggregate.error is not None
    assert "'bad'" in aggregate.error
    assert aggregate.subtask("bad").status is SubtaskStatus.FAILED
    assert aggregate.subtask("after").status is SubtaskStatus.SKIPPED
    slow = aggregate.subtask("slow")
    assert slow.status is SubtaskStatus.CANCELLED
    # The worker names itself only once work has run 0.2 s; the cancel reached it anyway.
    assert slow.agents in ([], ["worker-1"])
    assert aggregate.totals.cancelled == 1
    cancelled = worker.logged("hang cancelled")
    assert cancelled is not None
    assert (cancelled["subtask_id"], cancelled["agent_id"]) == ("slow", "worker-1")
    transitions = {(p.subtask_id, p.transition) for p in progress}
    assert {("slow", "cancelled"), ("after", "skipped"), ("bad", "failed")} <= transitions


async def test_cyclic_plan_is_refused_before_anything_is_sent(procs: Processes) -> None:
    """`plan run` on a cyclic plan exits non-zero naming the cycle; the leader gets nothing."""
    port = free_port()
    _, started = await team(procs, {"worker-1": ("Worker",)}, "--metrics-port", str(port))
    cyclic = {
        "subtasks": [
            {"id": "a", "skill": "square", "parameters": {"n": 1}, "depends_on": ["c"]},
            {"id": "b", "skill": "square", "parameters": {"n": 1}, "depends_on": ["a"]},
            {"id": "c", "skill": "square", "parameters": {"n": 1}, "depends_on": ["b"]},
        ]
    }
    (procs.workdir / "cyclic.json").write_text(json.dumps(cyclic), encoding="utf-8")
    before = await asyncio.to_thread(requests_consumed, port, LEADER)

    done = await procs.cli("plan", "run", "cyclic.json", "--json")
    after = await asyncio.to_thread(requests_consumed, port, LEADER)
    # The same plan sent straight to the leader, past the CLI's check: refused there too.
    raw = await procs.cli("request", "leader", "run_plan", "--params", json.dumps({"plan": cyclic}))
    refused = await asyncio.to_thread(requests_consumed, port, LEADER)

    assert done.returncode == 3  # could not run: not 2, which means the plan ran and failed
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "agentbus: error: invalid plan: the plan has a cycle: a -> c -> b -> a"
    ]
    naming = done.stderr.splitlines()
    assert "the plan has a cycle: a -> c -> b -> a" in naming[0]
    assert after == before, "no request reached the leader"
    assert raw.returncode == 1, raw.stderr
    error = json.loads(raw.stdout)
    assert (error["sender_id"], error["payload"]["code"]) == (LEADER, "invalid_parameters")
    assert "cycle: a -> c -> b -> a" in error["payload"]["message"]
    assert refused == before + 1, "the metric counts what does reach the leader"
    assert started[LEADER].logged("plan started") is None


async def test_plan_from_amqp_publish_gets_the_aggregate(procs: Processes) -> None:
    """A plan sent with amqp-publish (no Python) gets the aggregate on its own reply queue."""
    await team(procs, {"worker-1": ("Worker",)})
    url = procs.url.rstrip("/")
    queue = f"{procs.exchange}.shell-replies"
    fan_out = squares(3, prefix="s")
    plan = {
        "id": "shell-plan",
        "subtasks": [
            *fan_out,
            {
                "id": "sum",
                "skill": "total",
                "depends_on": ["s0", "s1", "s2"],
                "inputs": {"values": ["s0", "s1", "s2"]},
            },
        ],
    }
    body = orjson.dumps(
        {
            "protocol_version": "1.0",
            "sender_id": "shell",
            "receiver_id": "leader",
            "message_type": "request",
            "payload": {"action": "run_plan", "parameters": {"plan": plan}},
        }
    ).decode()

    def tool(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(args, capture_output=True, timeout=30, check=False)

    def checked(*args: str) -> None:
        done = tool(*args)
        assert done.returncode == 0, done.stderr.decode()

    await asyncio.to_thread(checked, amqp_tool("amqp-declare-queue"), "-u", url, "-q", queue)
    try:
        await asyncio.to_thread(
            checked,
            amqp_tool("amqp-publish"), "-u", url, "-e", procs.exchange,
            "-r", "agent.leader.request", "-C", "application/json", "-t", queue, "-b", body,
        )  # fmt: skip

        async def reply() -> dict[str, Any] | None:
            done = await asyncio.to_thread(tool, amqp_tool("amqp-get"), "-u", url, "-q", queue)
            if done.returncode == 0 and done.stdout:
                answer: dict[str, Any] = orjson.loads(done.stdout)
                return answer
            return None

        answer = await poll(reply, PLAN_TIMEOUT, "the aggregate on the shell's reply queue")
    finally:
        await asyncio.to_thread(tool, amqp_tool("amqp-delete-queue"), "-u", url, "-q", queue)

    assert (answer["message_type"], answer["sender_id"]) == ("response", LEADER)
    assert answer["receiver_id"] == "shell"
    assert answer["payload"]["status"] == "success"
    aggregate = Aggregate.model_validate(answer["payload"]["result"])
    assert (aggregate.plan_id, aggregate.status) == ("shell-plan", PlanStatus.COMPLETED)
    assert {o.id: o.result for o in aggregate.subtasks} == {"s0": 0, "s1": 1, "s2": 4, "sum": 5}
    assert aggregate.totals.agents_used == ["worker-1"]


async def test_cli_exit_status_follows_the_plan_and_shows_progress(procs: Processes) -> None:
    """`plan run --json` exits 0/1/2 for completed/partial/failed, progress lines on stderr."""
    await team(procs, {"worker-1": ("Worker",)})
    plans = {
        "completed": [{"id": "x", "skill": "square", "parameters": {"n": 4}}],
        "partial": [
            {"id": "x", "skill": "square", "parameters": {"n": 4}},
            {"id": "bad", "skill": "fail", "critical": False},
        ],
        "failed": [
            {"id": "x", "skill": "square", "parameters": {"n": 4}},
            {"id": "bad", "skill": "fail"},
            {"id": "after", "skill": "square", "parameters": {"n": 1}, "depends_on": ["bad"]},
        ],
    }
    for name, subtasks in plans.items():
        document = {"id": f"cli-{name}", "subtasks": subtasks}
        (procs.workdir / f"{name}.json").write_text(json.dumps(document), encoding="utf-8")

    runs = await asyncio.gather(
        *(
            procs.cli("plan", "run", f"{name}.json", "--json", "--timeout", str(PLAN_TIMEOUT))
            for name in plans
        )
    )

    done = dict(zip(plans, runs, strict=True))
    for name, run in done.items():
        print(f"--- {name}: exit {run.returncode}\n{run.stderr}")
    assert {name: run.returncode for name, run in done.items()} == {
        "completed": 0,
        "partial": 1,
        "failed": 2,
    }
    for name, run in done.items():
        aggregate = Aggregate.model_validate_json(run.stdout)
        assert (aggregate.plan_id, aggregate.status) == (f"cli-{name}", name)
        assert aggregate.subtask("x").result == 16
        lines = run.stderr.splitlines()
        assert any("x (square) started" in line for line in lines), run.stderr
        assert any("x (square) succeeded" in line for line in lines), run.stderr
    failed_lines = done["failed"].stderr.splitlines()
    assert any("bad (fail) failed" in line for line in failed_lines)
    assert any("after (square) skipped" in line for line in failed_lines)
    assert any("bad (fail) failed" in line for line in done["partial"].stderr.splitlines())


async def test_cli_looks_up_and_watches_a_plan_by_id(procs: Processes) -> None:
    """`plan status` while it runs (exit 4) and once ended (exit 0, the aggregate);
    `plan watch` from a client that did not submit it follows it to its end."""
    client, _ = await team(procs, {"alpha-1": ("Alpha",)}, "--durable")
    plan = {
        "id": "looked-up",
        "subtasks": [
            # Long enough that a CLI started on a loaded host still finds it running.
            {"id": "wait", "skill": "slow", "parameters": {"seconds": 6}},
            {"id": "then", "skill": "double", "depends_on": ["wait"], "parameters": {"n": 21}},
        ],
    }
    running = asyncio.create_task(PlanClient(client).run(plan, timeout=PLAN_TIMEOUT))
    while True:  # until the leader has the plan and its first step runs
        early = await procs.cli("plan", "status", "looked-up", "--json")
        if early.returncode == 4 and json.loads(early.stdout)["subtasks"][0]["status"] == "running":
            break
        assert early.returncode in (3, 4), early.stderr
        await asyncio.sleep(0.1)
    watched = asyncio.create_task(procs.cli("plan", "watch", "looked-up"))
    aggregate = await running
    watch = await watched
    after = await procs.cli("plan", "status", "looked-up", "--json")
    unknown = await procs.cli("plan", "status", "nope")

    assert early.returncode == 4, early.stderr
    state = json.loads(early.stdout)
    assert (state["state"], state["leader"], state["total"]) == ("running", LEADER, 2)
    assert [s["status"] for s in state["subtasks"]] == ["running", "pending"]
    assert watch.returncode == 0, watch.stderr
    assert "then" in watch.stdout
    assert "succeeded" in watch.stdout
    assert after.returncode == 0, after.stderr
    ended = json.loads(after.stdout)
    assert ended["state"] == "ended"
    assert ended["aggregate"]["subtasks"][1]["result"] == 42
    assert aggregate.subtask("then").result == 42
    assert unknown.returncode == 3
    assert unknown.stderr.strip() == (
        "agentbus: error: RemoteError [invalid_parameters]: no plan 'nope' is known to "
        "leader-1: not running here, "
        "not ended here lately, and not in the leaders' journal"
    )


async def test_cli_request_as_a_task_is_looked_up_after_its_requester_went(
    procs: Processes,
) -> None:
    """`request --task`: the task's id first; its requester killed mid-way, the task
    still ends and `plan status ID` gives its result; a second task answers in line."""
    await team(procs, {"alpha-1": ("Alpha",)})
    argv = procs.command(
        *("request", "alpha", "slow", "-p", '{"seconds": 6}', "--task", "--task-id", "t-gone")
    )
    requester = await asyncio.create_subprocess_exec(
        *argv, env=procs.env, cwd=procs.workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        while True:  # until the leader runs the task
            early = await procs.cli("plan", "status", "t-gone", "--json")
            if early.returncode == 4:
                break
            assert early.returncode == 3, early.stderr
            await asyncio.sleep(0.1)
    finally:
        requester.kill()
    _, said = await asyncio.wait_for(requester.communicate(), 10)

    async def ended() -> subprocess.CompletedProcess[str] | None:
        after = await procs.cli("plan", "status", "t-gone", "--json")
        return after if after.returncode != 4 else None

    after = await poll(ended, 20, "the task to end")
    in_line = await procs.cli("request", "alpha", "double", "-p", '{"n": 21}', "--task")

    assert "task t-gone (look it up: agentbus plan status t-gone)" in said.decode()
    assert after.returncode == 0, after.stderr
    (outcome,) = json.loads(after.stdout)["aggregate"]["subtasks"]
    assert (outcome["id"], outcome["status"], outcome["attempts"]) == ("task", "succeeded", 1)
    assert outcome["result"] == "slept 6s"
    assert in_line.returncode == 0, in_line.stderr
    assert json.loads(in_line.stdout)["result"] == 42
    assert "task task-" in in_line.stderr
