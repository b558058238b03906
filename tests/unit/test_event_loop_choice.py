"""AGENTBUS_LOOP: every agentbus process runs on uvloop when agentbus[fast] installed it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
import uvloop  # the fast extra, part of dev

from agentbus._exceptions import ConfigurationError
from agentbus._loop import LOOP_ENV, loop_factory, loop_name, run


async def _kind() -> str:
    return loop_name()


def test_uvloop_is_the_default_where_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no setting, and with ``auto`` or ``uvloop``, the loop is uvloop's."""
    monkeypatch.delenv(LOOP_ENV, raising=False)
    assert run(_kind()) == "uvloop"
    for choice in ("auto", "uvloop", " UVLOOP "):
        monkeypatch.setenv(LOOP_ENV, choice)
        assert loop_factory() is uvloop.new_event_loop
        assert run(_kind()) == "uvloop"


def test_asyncio_chooses_the_standard_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """``AGENTBUS_LOOP=asyncio`` keeps asyncio's own loop (the suite's same-loop baseline)."""
    monkeypatch.setenv(LOOP_ENV, "asyncio")
    assert loop_factory() is None
    assert run(_kind()) == "asyncio"


def test_an_unknown_choice_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A misspelt choice fails before any loop starts, and the coroutine is not left unawaited."""
    monkeypatch.setenv(LOOP_ENV, "tokio")
    coroutine = _kind()
    with pytest.raises(ConfigurationError, match="AGENTBUS_LOOP='tokio'"):
        run(coroutine)
    assert coroutine.cr_frame is None  # closed


def test_the_cli_reports_a_bad_choice_in_one_line() -> None:
    """``agentbus`` with a bad AGENTBUS_LOOP exits non-zero with one line, no traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "agentbus", "registry", "--heartbeat", "1"],
        env={**_environ(), LOOP_ENV: "tokio"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "AGENTBUS_LOOP='tokio'" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_uvloop_missing_but_asked_for_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``uvloop`` asked for without the package: the error names the extra."""
    monkeypatch.setenv(LOOP_ENV, "uvloop")
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import fails
    with pytest.raises(ConfigurationError, match=r"agentbus\[fast\]"):
        loop_factory()
    monkeypatch.setenv(LOOP_ENV, "auto")
    assert loop_factory() is None


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != LOOP_ENV}


def test_loop_name_tells_the_running_loop() -> None:
    """``loop_name`` reads the running loop, whatever made it."""
    assert asyncio.run(_kind()) == "asyncio"
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(_kind()) == "uvloop"
