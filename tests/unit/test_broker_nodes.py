"""Broker nodes: one URL or a cluster's nodes in kombu's ``;`` form, each a full URL."""

from __future__ import annotations

import pytest
import structlog

from agentbus import ConfigurationError, Settings
from agentbus._config import mask_url
from agentbus.bus._rabbitmq._nodes import broker_nodes


def test_one_url_is_one_node_as_given() -> None:
    """A single URL comes back unchanged."""
    assert broker_nodes("amqp://u:p@rabbit:5672/prod?heartbeat=5") == (
        "amqp://u:p@rabbit:5672/prod?heartbeat=5",
    )


def test_later_nodes_take_what_they_leave_out_from_the_first() -> None:
    """Scheme, credentials, virtual host and query are the first node's unless given."""
    nodes = broker_nodes(
        "amqps://u:p@rabbit-1:5671/prod?heartbeat=5; rabbit-2:5672 ;"
        "amqp://other:pw@rabbit-3/dev?heartbeat=9"
    )
    assert nodes == (
        "amqps://u:p@rabbit-1:5671/prod?heartbeat=5",
        "amqps://u:p@rabbit-2:5672/prod?heartbeat=5",
        "amqp://other:pw@rabbit-3/dev?heartbeat=9",
    )


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://localhost:15672/", "is not amqp:// or amqps://"),
        ("amqp://u:p@a:5672/;;b", "has an empty node"),
        ("", "names no node"),
        ("amqp://u:p@a:5672/;amqp://:5673", "names no host"),
        ("amqp://u:p@a:notaport/", "is not valid"),
    ],
)
def test_a_node_that_is_not_an_amqp_url_is_a_configuration_error(url: str, says: str) -> None:
    """The error names what is wrong, and never the password."""
    with pytest.raises(ConfigurationError, match=says) as raised:
        broker_nodes(url)
    assert ":p@" not in str(raised.value)


def test_every_node_is_masked() -> None:
    """Logs and errors show each node's user but no password."""
    masked = mask_url("amqp://u:secret@a:5672/;b:5673;amqp://v:other@c/")
    assert masked == "amqp://u:***@a:5672/;b:5673;amqp://v:***@c/"
    assert "secret" not in masked
    assert "other" not in masked


def test_settings_take_a_node_list() -> None:
    """The URL setting holds a node list as it is; the bus splits it when it connects."""
    settings = Settings(url="amqp://guest:guest@a:5672/;b:5673")
    assert broker_nodes(settings.url)[1] == "amqp://guest:guest@b:5673/"


def test_the_cli_refuses_a_url_that_is_not_amqp_in_one_line() -> None:
    """`agentbus --url http://...` says the scheme is wrong, not that a host is unknown."""
    from click.testing import CliRunner

    from agentbus.cli import cli

    try:
        result = CliRunner().invoke(cli, ["--url", "http://localhost:15672/", "agents"])
    finally:
        structlog.reset_defaults()  # the CLI configured logging for its process
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigurationError)
    assert "is not amqp:// or amqps://" in str(result.exception)
