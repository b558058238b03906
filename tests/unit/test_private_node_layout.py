"""Unit tests of a private node's layout: its own files, ports and environment, no broker.

A stand-in ``rabbitmq-server`` records the environment it was started with, then exits;
the start fails as it should, and the node's directory is left to inspect until ``stop``.
"""

from __future__ import annotations

import json
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentbus.testing.chaos import BrokerState, PrivateBroker, PrivateBrokerError, find_rabbitmq

SHARED_PORTS = {4369, 5672, 25672, *range(35672, 35683)}  # a shared node's and its tools'
STAND_IN = f"""#!{sys.executable}
import json, os, pathlib
log = pathlib.Path(os.environ["RABBITMQ_LOG_BASE"])
(log / "env.json").write_text(json.dumps(dict(os.environ)))
raise SystemExit(3)
"""


@dataclass(frozen=True, slots=True)
class Started:
    """A node whose start was attempted with the stand-in server."""

    broker: PrivateBroker
    directory: Path
    env: dict[str, str]


def _sbin(directory: Path, *, ctl: bool = True) -> Path:
    directory.mkdir()
    (directory / "rabbitmq-server").write_text(STAND_IN)
    (directory / "rabbitmq-server").chmod(0o755)
    if ctl:
        (directory / "rabbitmqctl").write_text("#!/bin/sh\nexit 1\n")
        (directory / "rabbitmqctl").chmod(0o755)
    return directory


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    """One start with a stray RabbitMQ and Erlang environment around it."""
    sbin = _sbin(tmp_path_factory.mktemp("node") / "sbin")
    broker = PrivateBroker("unit", sbin=sbin, config={"heartbeat": "5"}, start_timeout=30)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RABBITMQ_NODENAME", "rabbit@shared")
        patch.setenv("RABBITMQ_CONFIG_FILE", "/etc/rabbitmq/rabbitmq.conf")
        patch.setenv("ERL_FLAGS", "-setcookie shared")
        with pytest.raises(PrivateBrokerError, match=r"exited \(3\) while starting"):
            broker.start()
    assert broker.directory is not None
    env = json.loads((broker.directory / "log" / "env.json").read_text())
    yield Started(broker, broker.directory, env)
    broker.stop()


def test_a_failed_start_leaves_the_node_down(started: Started) -> None:
    """A server that exits while starting fails the start with its exit status; node down."""
    assert started.broker.state is BrokerState.DOWN
    assert not started.broker.is_running


def test_the_node_gets_two_ports_none_of_a_shared_node(started: Started) -> None:
    """AMQP and distribution ports differ, are on 127.0.0.1, and are never a shared node's."""
    broker, env = started.broker, started.env
    assert broker.port != broker.dist_port
    assert not {broker.port, broker.dist_port} & SHARED_PORTS
    assert env["RABBITMQ_NODE_PORT"] == str(broker.port)
    assert env["RABBITMQ_DIST_PORT"] == str(broker.dist_port)
    assert env["RABBITMQ_NODE_IP_ADDRESS"] == "127.0.0.1"
    assert broker.url == f"amqp://guest:guest@127.0.0.1:{broker.port}/"


def test_every_file_of_the_node_is_under_its_directory(started: Started) -> None:
    """No file of the node, nor its cookie's home, is outside its directory; none in /etc."""
    paths = {
        key: value
        for key, value in started.env.items()
        if key.startswith("RABBITMQ_") and key != "RABBITMQ_HOME" and "/" in value
    }
    assert "RABBITMQ_CONFIG_FILE" in paths
    assert all(Path(value).is_relative_to(started.directory) for value in paths.values())
    assert Path(started.env["HOME"]) == started.directory / "home"


def test_stray_rabbitmq_and_erlang_settings_do_not_leak_in(started: Started) -> None:
    """The shared node's name, config file and Erlang flags are not the private node's."""
    assert started.env["RABBITMQ_NODENAME"] == started.broker.node
    assert started.broker.node.startswith("unit-")
    assert started.broker.node.endswith("@localhost")
    assert started.env["RABBITMQ_CONFIG_FILE"] == str(started.directory / "rabbitmq.conf")
    assert "ERL_FLAGS" not in started.env


def test_the_config_and_cookie_are_written(started: Started) -> None:
    """rabbitmq.conf carries the extra settings; the cookie is readable by its owner only."""
    config = (started.directory / "rabbitmq.conf").read_text().splitlines()
    assert "heartbeat = 5" in config
    assert "log.console = false" in config
    cookie = started.directory / "home" / ".erlang.cookie"
    assert stat.S_IMODE(cookie.stat().st_mode) == 0o400
    assert len(cookie.read_text()) == 40


def test_stop_removes_the_directory(tmp_path: Path) -> None:
    """After a failed start, stop closes the node for good and removes its directory."""
    broker = PrivateBroker("unit", sbin=_sbin(tmp_path / "sbin"), start_timeout=30)
    with pytest.raises(PrivateBrokerError):
        broker.start()
    assert broker.directory is not None
    assert broker.directory.is_dir()
    broker.stop()
    assert broker.state is BrokerState.CLOSED
    assert not broker.directory.exists()


def test_find_rabbitmq_prefers_the_configured_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$AGENTBUS_RABBITMQ_SBIN wins when it holds rabbitmq-server and rabbitmqctl."""
    sbin = _sbin(tmp_path / "sbin")
    monkeypatch.setenv("AGENTBUS_RABBITMQ_SBIN", str(sbin))
    assert find_rabbitmq() == sbin


def test_find_rabbitmq_skips_a_directory_without_rabbitmqctl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory missing rabbitmqctl is not taken for an installation."""
    sbin = _sbin(tmp_path / "sbin", ctl=False)
    monkeypatch.setenv("AGENTBUS_RABBITMQ_SBIN", str(sbin))
    assert find_rabbitmq() != sbin


def test_a_cluster_node_takes_its_name_cookie_and_environment(tmp_path: Path) -> None:
    """A cluster's node: the name given, the shared cookie, the private epmd port in its env."""
    cookie = "A" * 40
    broker = PrivateBroker(
        sbin=_sbin(tmp_path / "sbin"),
        node="agentbus-cunit-0@localhost",
        cookie=cookie,
        env={"ERL_EPMD_PORT": "45001"},
        start_timeout=30,
    )
    with pytest.raises(PrivateBrokerError):
        broker.start()
    assert broker.directory is not None
    env = json.loads((broker.directory / "log" / "env.json").read_text())
    try:
        assert env["RABBITMQ_NODENAME"] == "agentbus-cunit-0@localhost"
        assert env["ERL_EPMD_PORT"] == "45001"
        assert (broker.directory / "home" / ".erlang.cookie").read_text() == cookie
    finally:
        broker.stop()
