"""The A2A TCK's mandatory category against the gateway, on JSON-RPC and on HTTP+JSON.

The TCK (github.com/a2aproject/a2a-tck, vendored as tests/gateway/tck/a2a-tck-*.tar.gz) runs
as a subprocess from its own virtualenv, made by ``scripts/ensure-a2a-tck``, against a gateway
on the real broker that serves an agent at its root (the TCK finds the agent by its host):
the ``shouter``, whose tasks complete at once, then the ``chatter``, whose tasks wait for
input (it asks for more until told no), so that the TCK's tests of messages on an open task
run too. Each run must end with no failure; the tests left out are named below, each with
its reason (a test that contradicts the specification the TCK ships, or one that needs a
task still open, left out for the shouter only). Without the TCK the tier skips, or fails
under CI.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
from gateway_agents import Chatter, Shouter
from gateway_team import HEARTBEAT, Team

from agentbus.gateway import ApiKeys
from support.required import missing
from support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
VENDORED = ROOT / "tests" / "gateway" / "tck"
TARBALL = VENDORED / "a2a-tck-410ba92e.tar.gz"
CACHE = ROOT / ".cache" / "a2a-tck"
TCK = CACHE / "src"
PYTHON = CACHE / "venv" / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
ENSURE = "run scripts/ensure-a2a-tck (scripts/test does)"
TCK_KEY = "tck-key-0123456789abcdef"
RUN_LIMIT = 300.0  # seconds for one binding's run (about 5 s here)

# The bindings as the TCK names them (--transports).
BINDINGS = {"JSONRPC": "jsonrpc", "HTTP+JSON": "rest"}
# What each run must pass at least, by agent and binding: the figures of docs/a2a.md, so
# that a run that skips more than it did cannot pass unnoticed.
AT_LEAST = {
    ("shouter", "JSONRPC"): 60,
    ("shouter", "HTTP+JSON"): 48,
    ("chatter", "JSONRPC"): 64,
    ("chatter", "HTTP+JSON"): 52,
}
AGENTS = {"shouter": Shouter, "chatter": Chatter}

_LIST = "tests/mandatory/protocol/test_tasks_list_method.py"
_WORKING_AFTER_BLOCKING = (
    "contradicts the spec it ships: its create_test_task sends SendMessage without "
    "returnImmediately, so blocking, which MUST wait until the task is terminal or interrupted "
    "(§3.2.2, a2a.proto SendMessageConfiguration.return_immediately), then requires the task "
    "to be TASK_STATE_WORKING; only an agent that breaks the blocking rule passes"
)
_FOLLOW_UP_ON_FINISHED = (
    "contradicts the spec it ships: it sends follow-up messages (taskId) to the task its "
    "blocking SendMessage returned completed, and expects them accepted; §3.1.1: messages "
    "sent to tasks in a terminal state MUST get UnsupportedOperationError (which they get)"
)
_CANCEL_FINISHED = (
    "contradicts the spec it ships: it cancels the task its blocking SendMessage returned "
    "completed, and expects a canceled task; §3.1.5/§3.3.2: cancelling a task in a terminal "
    "state is TaskNotCancelableError (which it gets)"
)
_PAGE_SIZE_AS_COUNT = (
    "contradicts the spec it ships: it wants pageSize to be the number of tasks returned, "
    "while a2a.proto ListTasksResponse.page_size is 'the page size used for this response' "
    "(the spec's own §6.5 example answers pageSize 20 with totalSize 1)"
)

# Left out for the shouter only, on both bindings: they pass against the chatter, whose
# task is still open (waiting for input) when a blocking SendMessage returns.
OPEN_TASK_NEEDED: dict[str, str] = {
    "tests/mandatory/protocol/test_a2a_v030_new_methods.py::TestMethodMappingCompliance::"
    "test_core_method_mapping_compliance": _CANCEL_FINISHED,
    "tests/mandatory/protocol/test_tasks_cancel_method.py::test_tasks_cancel_valid": (
        _CANCEL_FINISHED
    ),
    "tests/mandatory/protocol/test_message_send_method.py::test_message_send_continue_task": (
        _FOLLOW_UP_ON_FINISHED
    ),
    "tests/mandatory/protocol/test_state_transitions.py::test_task_history_length": (
        _FOLLOW_UP_ON_FINISHED
    ),
}

# Left out for both agents, on both bindings: TCK node id -> why.
LEFT_OUT: dict[str, str] = {
    f"{_LIST}::TestBasicListing::test_list_all_tasks": _WORKING_AFTER_BLOCKING,
    f"{_LIST}::TestBasicListing::test_list_tasks_validates_required_fields": (
        _WORKING_AFTER_BLOCKING
    ),
    f"{_LIST}::TestBasicListing::test_list_tasks_sorted_by_timestamp_descending": (
        _WORKING_AFTER_BLOCKING
    ),
    f"{_LIST}::TestBasicListing::test_list_tasks_empty_when_none_exist": _PAGE_SIZE_AS_COUNT,
    f"{_LIST}::TestFiltering::test_filter_by_context_id": _WORKING_AFTER_BLOCKING,
    f"{_LIST}::TestFiltering::test_filter_by_status": _WORKING_AFTER_BLOCKING,
    f"{_LIST}::TestFiltering::test_filter_by_last_updated_after": _WORKING_AFTER_BLOCKING,
    f"{_LIST}::TestFiltering::test_combined_filters": _WORKING_AFTER_BLOCKING,
    f"{_LIST}::TestPagination::test_default_page_size": _PAGE_SIZE_AS_COUNT,
    f"{_LIST}::TestPagination::test_custom_page_size": _WORKING_AFTER_BLOCKING,
    f"{_LIST}::TestPagination::test_page_token_navigation": _WORKING_AFTER_BLOCKING,
    f"{_LIST}::TestPagination::test_last_page_detection": _WORKING_AFTER_BLOCKING,
    f"{_LIST}::TestPagination::test_total_size_accuracy": _WORKING_AFTER_BLOCKING,
    f"{_LIST}::TestHistoryLimiting::test_history_length_zero": _WORKING_AFTER_BLOCKING,
    f"{_LIST}::TestHistoryLimiting::test_history_length_custom": _WORKING_AFTER_BLOCKING,
    f"{_LIST}::TestHistoryLimiting::test_history_length_exceeds_actual": (_WORKING_AFTER_BLOCKING),
    f"{_LIST}::TestArtifactInclusion::test_artifacts_excluded_by_default": (
        _WORKING_AFTER_BLOCKING
    ),
    f"{_LIST}::TestArtifactInclusion::test_artifacts_included_when_requested": (
        _WORKING_AFTER_BLOCKING
    ),
    f"{_LIST}::TestEdgeCasesAndErrors::test_default_page_size_is_50": _WORKING_AFTER_BLOCKING,
}


# The TCK's optional tests that send messages on a task still open (its multi-turn tests),
# run against the chatter. Its test_task_state_quality.py::test_task_state_transitions is
# not among them: it wants the task a blocking SendMessage returned still WORKING, as
# _WORKING_AFTER_BLOCKING says; test_push_notification_config_methods.py is not vendored
# (it needs aiohttp for its webhook).
MULTI_TURN = [
    "tests/optional/capabilities/test_message_send_capabilities.py::"
    "test_message_send_continue_with_contextid",
    "tests/optional/quality/test_task_state_quality.py::test_task_cancel_state_handling",
    "tests/optional/quality/test_resilience.py::test_partial_update_recovery",
]


def tck_ready() -> Path:
    """The unpacked TCK, made from the vendored tarball as it is now; skip or fail without."""
    requirements = VENDORED / "requirements.txt"
    want = hashlib.sha256(TARBALL.read_bytes() + requirements.read_bytes()).hexdigest()
    digest = CACHE / "digest"
    made = digest.read_text().strip() if digest.is_file() else None
    if made != want or not PYTHON.is_file():
        reason = "not made" if made is None else "made from another tarball or requirements"
        missing(f"the A2A TCK is {reason} in {CACHE.relative_to(ROOT)}: {ENSURE}")
    return TCK


def test_every_left_out_test_is_one_the_tck_has() -> None:
    """The list names tests of this TCK (a renamed one would run again, unnoticed otherwise)."""
    tck = tck_ready()
    missing = []
    for node in [*LEFT_OUT, *OPEN_TASK_NEEDED, *MULTI_TURN]:
        path, *names = node.split("::")
        source = tck / path
        if not source.is_file() or any(
            f"def {name}(" not in source.read_text() and f"class {name}" not in source.read_text()
            for name in names
        ):
            missing.append(node)
    assert missing == []


async def run_tck(
    url: str, transport: str, report: Path, left_out: list[str], tests: list[str] | None = None
) -> str:
    """Run the mandatory category (or the TCK's ``tests``) against ``url`` on
    ``transport``, but the tests ``left_out``; return its output."""
    markers = "mandatory or mandatory_protocol"  # as run_tck.py --category mandatory does
    if transport == "jsonrpc":
        markers += " or mandatory_jsonrpc"
    chosen = ["tests/mandatory/", "-m", markers] if tests is None else tests
    command = [
        str(PYTHON), "-m", "pytest", *chosen, f"--sut-url={url}",
        "--test-scope=all", "--tb=short", "-q", "-p", "no:cacheprovider",
        "--transports", transport, f"--junitxml={report}",
    ]  # fmt: skip
    for node in left_out:
        command += ["--deselect", node]
    # The TCK's clients send no A2A-Version header, though A2A 1.0 clients MUST (without
    # one, the request is 0.3); A2A_AUTH_HEADERS is the TCK's way to add headers.
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {TCK_KEY}"}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["A2A_AUTH_HEADERS"] = json.dumps(headers)
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=TCK,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), RUN_LIMIT)
    except TimeoutError:
        process.kill()
        out, _ = await process.communicate()
        pytest.fail(f"the TCK ran over {RUN_LIMIT:g} s:\n{out.decode()[-4000:]}", pytrace=False)
    return out.decode()


def outcomes(report: Path) -> tuple[int, list[str], int]:
    """(passed, ``class.name: message`` of each failure or error, skipped) from JUnit XML."""
    passed, failed, skipped = 0, [], 0
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            message = (problem.get("message") or "").splitlines()[:1]
            failed.append(f"{case.get('classname')}.{case.get('name')}: {''.join(message)}")
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


@pytest.mark.parametrize("agent", list(AGENTS))
@pytest.mark.parametrize("binding", list(BINDINGS))
async def test_the_tck_mandatory_category_passes(
    team: Team, binding: str, agent: str, tmp_path: Path
) -> None:
    """Every mandatory test the TCK runs on the binding against the agent passes, but
    those left out (LEFT_OUT, and for the shouter OPEN_TASK_NEEDED)."""
    tck_ready()
    await team.add(
        AGENTS[agent](agent_id=f"{agent}-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    )
    # localhost: the TCK takes an IP address in a public card for a leaked internal address.
    gateway = await team.serve(
        ApiKeys.from_mapping({TCK_KEY: "tck"}), public_host="localhost", root_service=agent
    )
    await wait_until(lambda: agent in gateway.directory.cards, 15)
    report = tmp_path / "tck.xml"
    left_out = [*LEFT_OUT, *(OPEN_TASK_NEEDED if agent == "shouter" else ())]
    output = await run_tck(team.url, BINDINGS[binding], report, left_out)
    assert report.is_file(), output[-4000:]
    passed, failed, skipped = outcomes(report)
    print(
        f"A2A TCK mandatory, {agent}, {binding}: {passed} passed, {len(failed)} failed, "
        f"{skipped} skipped, {len(left_out)} left out"
    )
    assert failed == [], output[-4000:]
    assert passed >= AT_LEAST[agent, binding], output[-4000:]


@pytest.mark.parametrize("binding", list(BINDINGS))
async def test_the_tcks_multi_turn_tests_pass_against_an_agent_that_asks(
    team: Team, binding: str, tmp_path: Path
) -> None:
    """The TCK's optional tests of messages on an open task (MULTI_TURN) all pass against
    the chatter: follow-ups with and without contextId, cancelling a task that waits."""
    tck_ready()
    await team.add(
        Chatter(agent_id="chatter-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    )
    gateway = await team.serve(
        ApiKeys.from_mapping({TCK_KEY: "tck"}), public_host="localhost", root_service="chatter"
    )
    await wait_until(lambda: "chatter" in gateway.directory.cards, 15)
    report = tmp_path / "tck.xml"
    output = await run_tck(team.url, BINDINGS[binding], report, [], tests=MULTI_TURN)
    assert report.is_file(), output[-4000:]
    passed, failed, skipped = outcomes(report)
    print(f"A2A TCK multi-turn, chatter, {binding}: {passed} passed, {len(failed)} failed, "
          f"{skipped} skipped")  # fmt: skip
    assert (passed, failed, skipped) == (len(MULTI_TURN), [], 0), output[-4000:]
