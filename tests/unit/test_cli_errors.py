"""The CLI's line for an agentbus error: one line, naming its class and its wire code."""

from __future__ import annotations

import sys

import pytest

from agentbus import (
    AccessRefused,
    AgentBusError,
    ConfigurationError,
    RemoteError,
    RequestTimeout,
    SiteUnreachable,
    Unroutable,
)
from agentbus.cli import _main
from agentbus.envelopes import ErrorEnvelope, ErrorPayload

_FAR = "nothing at this site serves 'billing', and no heartbeat was heard lately from b"
_UNKNOWN = ErrorEnvelope(
    sender_id="greeter-1",
    receiver_id="client",
    payload=ErrorPayload(code="unknown_action", message="no skill 'shout'"),
)


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            SiteUnreachable(_FAR, details={"sites": ["b"]}),
            f"SiteUnreachable [agent_unavailable]: {_FAR}",
        ),
        (Unroutable("nobody serves it"), "Unroutable [agent_unavailable]: nobody serves it"),
        (RequestTimeout("no answer in 5 s"), "RequestTimeout [timeout]: no answer in 5 s"),
        (AccessRefused("no write on x"), "AccessRefused [unauthorized]: no write on x"),
        (ConfigurationError("bad port"), "ConfigurationError [processing_failed]: bad port"),
        (
            AgentBusError("slow down", code="rate_limited"),
            "AgentBusError [rate_limited]: slow down",
        ),
        (RemoteError(_UNKNOWN), "RemoteError [unknown_action]: no skill 'shout'"),
    ],
)
def test_an_agentbus_error_is_one_line_with_its_class_and_code(
    error: AgentBusError,
    line: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Whatever the command, an AgentBusError ends it with exit status 2 and one line."""

    def fails(**options: object) -> None:
        raise error

    monkeypatch.setattr(_main.cli, "main", fails)
    with pytest.raises(SystemExit) as exited:
        _main.main()
    said = capsys.readouterr()
    assert exited.value.code == 2
    assert (said.out, said.err.splitlines()) == ("", [f"agentbus: error: {line}"])


def test_no_broker_is_named_with_its_class_and_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real command with nothing listening at its URL: BrokerUnavailable, in one line."""
    monkeypatch.setattr(sys, "argv", ["agentbus", "--url", "amqp://u:p@127.0.0.1:1/", "agents"])
    with pytest.raises(SystemExit) as exited:
        _main.main()
    [line] = capsys.readouterr().err.splitlines()
    assert exited.value.code == 2
    assert line.startswith(
        "agentbus: error: BrokerUnavailable [agent_unavailable]: cannot connect to the broker "
        "at amqp://u:***@127.0.0.1:1/"
    )
