"""Logging: JSON lines with the bound ids, readable console output, no broker password."""

from __future__ import annotations

import contextvars
import json
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest
import structlog

from agentbus import Agent, Settings, configure_logging, skill
from agentbus._logging import bind_delivery_ids, get_logger
from agentbus.testing import MemoryBroker, MemoryBus


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    logging.getLogger().handlers.clear()


def json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_json_lines_carry_level_time_and_event(capsys: pytest.CaptureFixture[str]) -> None:
    """The default non-terminal format is one JSON object per line."""
    configure_logging("info", "json")
    structlog.get_logger("t").info("hello", answer=42)
    [line] = json_lines(capsys.readouterr().err)
    assert line["event"] == "hello"
    assert line["answer"] == 42
    assert line["level"] == "info"
    assert str(line["timestamp"]).endswith("Z")


def test_level_setting_filters(capsys: pytest.CaptureFixture[str]) -> None:
    """Below the configured level nothing is written."""
    configure_logging("warning", "json")
    structlog.get_logger("t").info("quiet")
    structlog.get_logger("t").warning("loud")
    assert [line["event"] for line in json_lines(capsys.readouterr().err)] == ["loud"]


def test_broker_password_is_never_logged(capsys: pytest.CaptureFixture[str]) -> None:
    """A broker URL in any field, or in a stdlib log record, loses its password."""
    configure_logging("info", "json")
    structlog.get_logger("t").info("connecting", url="amqp://agent:hunter2@broker:5672/")
    logging.getLogger("aio_pika").warning("reconnect to amqps://agent:hunter2@broker/ failed")
    err = capsys.readouterr().err
    assert "hunter2" not in err
    assert "amqp://agent:***@broker:5672/" in err
    assert "amqps://agent:***@broker/" in err


def test_console_format_is_readable(capsys: pytest.CaptureFixture[str]) -> None:
    """The console format is plain text, not JSON."""
    configure_logging("info", "console")
    structlog.get_logger("t").info("hello", answer=42)
    err = capsys.readouterr().err
    assert "hello" in err
    assert "answer" in err
    assert not err.lstrip().startswith("{")


SECRET_URL = "amqp://agent:hunter2@broker/"


def _fail_with_a_secret_local(url: str) -> None:
    secret = url  # a frame's local: a traceback with locals would print it
    raise ValueError(f"boom after {len(secret)} characters")


def test_an_exception_logged_on_a_terminal_shows_no_locals(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The console's traceback names the frames and the error, never the frames' locals."""
    configure_logging("info", "console")
    try:
        _fail_with_a_secret_local(SECRET_URL)
    except ValueError:
        structlog.get_logger("t").exception("request handler failed")
    err = capsys.readouterr().err
    assert "_fail_with_a_secret_local" in err
    assert "boom after" in err
    assert "hunter2" not in err


def test_an_exception_logged_unconfigured_is_a_plain_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Unconfigured, the library's loggers hand the standard library a plain traceback."""
    with caplog.at_level(logging.ERROR):
        try:
            _fail_with_a_secret_local(SECRET_URL)
        except ValueError:
            get_logger("agentbus.test").exception("request handler failed")
    assert "Traceback (most recent call last):" in caplog.text
    assert "ValueError: boom after" in caplog.text
    assert "hunter2" not in caplog.text


class Noisy(Agent):
    name = "noisy"

    @skill
    async def speak(self) -> str:
        structlog.get_logger("noisy").info("speaking")
        return "ok"


async def test_ids_are_bound_on_every_line_of_a_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A skill's log line carries agent_id, message_id and correlation_id of its request."""
    configure_logging("info", "json")
    broker = MemoryBroker()
    settings = Settings()
    async with (
        MemoryBus(broker, settings, agent_id="noisy-1") as bus,
        Noisy(agent_id="noisy-1", bus=bus, settings=settings),
        MemoryBus(broker, settings, agent_id="asker") as client,
    ):
        reply = await client.request("noisy", "speak", timeout=5)
    [line] = [line for line in json_lines(capsys.readouterr().err) if line["event"] == "speaking"]
    assert reply.result == "ok"
    assert line["agent_id"] == "noisy-1"
    assert isinstance(line["message_id"], str)
    assert "correlation_id" in line


def test_delivery_ids_set_through_the_seam_are_structlogs_context_variables() -> None:
    """bind_delivery_ids sets what structlog.contextvars.get_contextvars() returns, nothing else."""

    def bind_and_read() -> dict[str, object]:
        structlog.contextvars.clear_contextvars()
        bind_delivery_ids("agent-1", "m-1", "c-1")
        return structlog.contextvars.get_contextvars()

    bound = contextvars.Context().run(bind_and_read)

    assert bound == {"agent_id": "agent-1", "message_id": "m-1", "correlation_id": "c-1"}
    assert structlog.contextvars.get_contextvars().get("message_id") != "m-1"  # no leak out


def test_delivery_ids_reach_a_log_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A line logged after bind_delivery_ids carries the three ids."""
    configure_logging("info", "json")

    def log() -> None:
        bind_delivery_ids("agent-1", "m-1", None)
        structlog.get_logger("t").info("handled")

    contextvars.Context().run(log)

    [line] = json_lines(capsys.readouterr().err)
    assert (line["agent_id"], line["message_id"]) == ("agent-1", "m-1")
    assert line["correlation_id"] is None


_LIBRARY_USER = """
import asyncio, logging, sys
from agentbus._logging import get_logger
from agentbus.testing import MemoryBroker, MemoryBus

async def main() -> None:
    async with MemoryBus(MemoryBroker(), agent_id="quiet-1"):  # logs 'bus open' at debug
        pass
    get_logger("agentbus.bus").warning("something to see", url="amqp://u:hunter2@h/")
    if sys.argv[1:] == ["configured"]:
        from agentbus import configure_logging
        configure_logging("debug", "json")
        async with MemoryBus(MemoryBroker(), agent_id="loud-1"):
            pass

asyncio.run(main())
"""


def _run_library_user(*args: str) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", _LIBRARY_USER, *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def test_a_library_user_who_configured_nothing_sees_warnings_not_debug_lines() -> None:
    """Unconfigured, agentbus logs through the standard library: warnings show, debug does not."""
    out, err = _run_library_user()
    assert out == ""
    [line] = err.splitlines()
    assert "something to see" in line
    assert "amqp://u:***@h/" in line
    assert "hunter2" not in err


def test_configure_logging_takes_over_the_library_loggers() -> None:
    """Loggers made before configure_logging write its format at its level afterwards."""
    _, err = _run_library_user("configured")
    events = [(line["event"], line.get("agent_id")) for line in json_lines(err)]
    assert ("bus open", "loud-1") in events
    assert all(agent != "quiet-1" for _, agent in events)
