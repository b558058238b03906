"""A broker for the demo: the configured one, else a local RabbitMQ started for it, else say how."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Final
from urllib.parse import urlsplit

from agentbus._config import mask_url
from agentbus._exceptions import BrokerUnavailable

__all__ = ["ensure_broker", "is_reachable"]

_LOCAL_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1"})
_AMQP_HEADER: Final = b"AMQP\x00\x00\x09\x01"


def is_reachable(url: str, timeout: float = 2.0) -> bool:
    """Tell whether an AMQP broker answers at ``url`` (protocol header, then a frame)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "localhost", parts.port or 5672
    try:
        with socket.create_connection((host, port), timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(_AMQP_HEADER)
            return bool(sock.recv(1))
    except OSError:
        return False


def ensure_broker(
    url: str,
    *,
    start_timeout: float = 90.0,
    say: Callable[[str], None] = print,
) -> str:
    """Return ``url`` once a broker answers there, starting a local one if need be.

    Tries, in order: the URL as it is; a local ``rabbitmq-server`` that is installed
    but stopped; Docker, where a Docker engine runs. Every wait is bounded.

    Raises:
        BrokerUnavailable: no broker could be had, with what to do about it.
    """
    if is_reachable(url):
        return url
    host = urlsplit(url).hostname or "localhost"
    if host in _LOCAL_HOSTS:
        server = shutil.which("rabbitmq-server")
        if server is not None:
            say(f"no broker at {mask_url(url)}: starting the local rabbitmq-server")
            subprocess.run([server, "-detached"], capture_output=True, timeout=30, check=False)
            if _wait(url, start_timeout):
                return url
        elif _docker_runs():
            say(f"no broker at {mask_url(url)}: starting RabbitMQ in Docker")
            subprocess.run(
                ["docker", "run", "-d", "--rm", "-p", "5672:5672", "rabbitmq:3"],
                capture_output=True,
                timeout=300,
                check=False,
            )
            if _wait(url, start_timeout):
                return url
    raise BrokerUnavailable(
        f"no RabbitMQ broker at {mask_url(url)}. Install one ('apt-get install rabbitmq-server', "
        "then 'rabbitmq-server -detached'), run one in Docker ('docker run -d -p 5672:5672 "
        "rabbitmq:3'), or point AGENTBUS_URL (or --url) at a running broker",
        details={"url": mask_url(url)},
    )


def _wait(url: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_reachable(url):
            return True
        time.sleep(0.5)
    return False


def _docker_runs() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        done = subprocess.run([docker, "info"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
