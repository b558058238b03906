"""Shared fixtures: the broker for the integration tier; the chaos kit's plugin, opted in."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from agentbus._config import DEFAULT_URL, mask_url
from support.broker import sweep
from support.required import is_required, missing

# The chaos kit's fixtures (private_broker, chaos_proxy, agent_process, ledger) for
# tests/chaos. Here, not in tests/chaos/conftest.py: pytest honours ``pytest_plugins``
# only in the conftest files it loads at startup, and a plain ``pytest`` loads
# tests/chaos/conftest.py later, during collection.
pytest_plugins = ["agentbus.testing.chaos.pytest_plugin", "support.tiers"]


def _reachable(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "localhost", parts.port or 5672), 2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def broker_url() -> Iterator[str]:
    """The URL of a real RabbitMQ: env, then localhost, then testcontainers; else fail or skip."""
    candidates = [os.environ.get("AGENTBUS_TEST_URL"), os.environ.get("AGENTBUS_URL"), DEFAULT_URL]
    for url in candidates:
        if url and _reachable(url):
            yield url
            return
    try:
        from testcontainers.rabbitmq import RabbitMqContainer

        with RabbitMqContainer("rabbitmq:3.13") as container:
            host = container.get_container_host_ip()
            port = container.get_exposed_port(5672)
            yield f"amqp://guest:guest@{host}:{port}/"
            return
    except Exception as exc:  # no testcontainers, or no Docker engine
        reason = f"{type(exc).__name__}: {exc}"
    tried = ", ".join(mask_url(u) for u in candidates if u)
    message = (
        f"no RabbitMQ for the integration tier (tried {tried}; testcontainers: {reason}). "
        "Run ./scripts/test, which starts one, or set AGENTBUS_TEST_URL."
    )
    missing(message)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/integration as ``integration``."""
    for item in items:
        if f"{os.sep}integration{os.sep}" in str(item.path):
            item.add_marker(pytest.mark.integration)


def pytest_sessionfinish() -> None:
    """Delete what the ended tests left on the broker under their exchanges' names."""
    sweep()


def pytest_report_header() -> str:
    """Say which broker the integration tier uses, or what happens without one."""
    candidates = [os.environ.get("AGENTBUS_TEST_URL"), os.environ.get("AGENTBUS_URL"), DEFAULT_URL]
    found = next((url for url in candidates if url and _reachable(url)), None)
    if found is not None:
        tier = f"integration tier on the broker at {mask_url(found)}"
    elif is_required():
        tier = "integration tier required, and no broker answers: it will fail"
    else:
        tier = "no broker answers: the integration tier will skip"
    return f"agentbus: {tier}; python {sys.version.split()[0]}"
