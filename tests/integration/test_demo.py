"""The main job, as a user runs it: `agentbus demo PATH` prints a report and leaves nothing."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

AGENTBUS = Path(sys.executable).with_name("agentbus")

TREE = {
    "simple.py": '"""Simple helpers for bees."""\n\ndef add(a, b):\n    return a + b\n',
    "pkg/branchy.py": (
        '"""Branchy code that counts honey."""\n\n\ndef judge(n):\n'
        + "".join(f"    if n == {i}:\n        return {i}\n" for i in range(12))
        + "    return -1\n"
    ),
    "pkg/__init__.py": "",
}


def make_tree(root: Path) -> Path:
    for name, text in TREE.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def processes_of(exchange: str) -> list[int]:
    """Pids of live processes started for this demo's exchange (from their environment)."""
    found = []
    needle = f"AGENTBUS_EXCHANGE={exchange}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def named_after(broker_url: str, exchange: str) -> list[str]:
    """The queues (streams included) and exchanges on the broker named after ``exchange``."""
    rabbitmqctl = shutil.which("rabbitmqctl")
    if rabbitmqctl is None:
        pytest.skip("rabbitmqctl is needed to list what the demo left on the broker")
    vhost = unquote(urlsplit(broker_url).path[1:]) or "/"
    names: list[str] = []
    for listing in ("list_queues", "list_exchanges"):
        done = subprocess.run(
            [rabbitmqctl, "-q", listing, "-p", vhost, "--no-table-headers", "name"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        names += [n for n in done.stdout.split() if n == exchange or n.startswith(f"{exchange}.")]
    return names


def demo_env(broker_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
    env["AGENTBUS_URL"] = broker_url
    return env


def test_demo_prints_the_report_and_stops_every_process(tmp_path: Path, broker_url: str) -> None:
    """The report has the tree's real figures; all 7 agents exit 0; no process is left, and
    nothing named after its exchange on the broker (queues, the plans' journal stream)."""
    root = make_tree(tmp_path / "tree")

    done = subprocess.run(
        [str(AGENTBUS), "demo", str(root)],
        capture_output=True,
        text=True,
        timeout=240,
        env=demo_env(broker_url),
    )

    out = done.stdout
    assert done.returncode == 0, done.stdout + done.stderr
    assert "# Code report: tree" in out
    assert "| Files | 3 |" in out
    assert "`judge`" in out  # complexity 13: a hotspot
    assert re.search(r"\| `judge` \| `pkg/branchy\.py:4` \| 13 \|", out)
    assert "Simple helpers for bees." in out or "Branchy code that counts honey." in out
    stopped = re.search(r"team stopped \((.*)\)", out)
    assert stopped is not None
    codes = dict(item.split("=") for item in stopped.group(1).split(", "))
    assert len(codes) == 7
    assert set(codes.values()) == {"0"}
    exchange = re.search(r"exchange (agentbus-demo-\w+)", out)
    assert exchange is not None
    assert processes_of(exchange.group(1)) == []
    assert named_after(broker_url, exchange.group(1)) == []
    logs = re.search(r"agent logs in (\S+)", out)
    assert logs is not None
    assert not Path(logs.group(1)).exists(), "a clean run leaves no log folder behind"


def test_ctrl_c_stops_a_kept_team_cleanly(tmp_path: Path, broker_url: str) -> None:
    """With --keep the team stays up; Ctrl-C (SIGINT) then stops every process."""
    root = make_tree(tmp_path / "tree")
    log = tmp_path / "demo.out"
    with log.open("w") as out:
        demo = subprocess.Popen(
            [str(AGENTBUS), "demo", str(root), "--keep"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=demo_env(broker_url),
        )
    try:
        deadline = time.monotonic() + 180
        while "Ctrl-C stops the team" not in log.read_text():
            assert demo.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        exchange = re.search(r"exchange (agentbus-demo-\w+)", log.read_text())
        assert exchange is not None
        assert len(processes_of(exchange.group(1))) == 7
        # The commands it suggests run as printed, from a shell without the venv active.
        suggested = re.search(r"^  (\S+ --exchange \S+ agents)$", log.read_text(), re.MULTILINE)
        assert suggested is not None, log.read_text()
        listed = subprocess.run(
            shlex.split(suggested.group(1)),
            capture_output=True,
            text=True,
            timeout=60,
            env={**demo_env(broker_url), "PATH": "/usr/bin:/bin"},
        )
        assert listed.returncode == 0, listed.stderr
        assert "demo-registry" in listed.stdout

        demo.send_signal(signal.SIGINT)
        status = demo.wait(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()

    text = log.read_text()
    assert status == 0, text
    assert "team stopped (" in text
    assert processes_of(exchange.group(1)) == []
    # The suggested command's own queue goes by itself (x-expires): the rest is gone now.
    left = named_after(broker_url, exchange.group(1))
    assert [name for name in left if ".instance.client-" not in name] == []


@pytest.mark.parametrize("bad", ["no-such-dir"])
def test_demo_refuses_a_missing_path_in_one_line(tmp_path: Path, bad: str) -> None:
    """A path that is not a directory is a usage error, not a traceback."""
    done = subprocess.run(
        [str(AGENTBUS), "demo", str(tmp_path / bad)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "does not exist" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("option", "url", "fallback"),
    [
        ("--in-memory", None, False),
        # Nothing listens there and it is not this host's: no broker to be had.
        (None, "amqp://guest:guest@127.0.0.2:1/", True),
    ],
)
def test_demo_without_a_broker_runs_the_team_in_memory(
    tmp_path: Path, option: str | None, url: str | None, fallback: bool
) -> None:
    """--in-memory, or no broker to be had: the same report, from a team in one process."""
    root = make_tree(tmp_path / "tree")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
    if url is not None:
        env["AGENTBUS_URL"] = url
    argv = [str(AGENTBUS), "demo", str(root), *([option] if option else [])]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| `judge` | `pkg/branchy.py:4` | 13 | C |" in done.stdout
    assert "team of 7 agents ready" in done.stdout
    assert done.stdout.rstrip().endswith("team stopped (7 agents, in this process)")
    said = "no broker: the team runs in this process, on the in-memory bus" in done.stdout
    assert said == fallback
    if fallback:
        assert "for the real thing: no RabbitMQ broker at amqp://guest:***@127.0.0.2:1/" in (
            done.stdout
        )
