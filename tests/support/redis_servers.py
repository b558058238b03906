"""Redis for the tests of the shared de-duplication store: a private server, or the tier's.

``scripts/ensure-redis`` starts one for the test run (``AGENTBUS_TEST_DEDUP_URL``, as
``scripts/ensure-broker`` does for RabbitMQ). A test that stops its server (the store
unreachable) gets a private one of its own: a ``redis-server`` on a free port, with no
persistence, in the test's directory. The machine's own Redis (6379) is never used.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from support.ports import free_port
from support.required import is_required, missing

ENV_URL = "AGENTBUS_TEST_DEDUP_URL"
START_TIMEOUT = 15.0


def find_redis() -> str | None:
    """The ``redis-server`` binary, or None."""
    found = shutil.which("redis-server")
    if found is None and os.access("/usr/bin/redis-server", os.X_OK):
        found = "/usr/bin/redis-server"
    return found


def answers(host: str, port: int) -> bool:
    """Whether a Redis server answers PING at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=2) as sock:
            sock.settimeout(2)
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """A private ``redis-server`` on a free port of 127.0.0.1: ``start``, ``stop``, ``url``."""

    def __init__(self, directory: Path, binary: str) -> None:
        self.directory = directory
        self.binary = binary
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> RedisServer:
        """Start the server (the same port each time) and wait until it answers."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._process = subprocess.Popen(
            [
                self.binary,
                *("--bind", "127.0.0.1", "--port", str(self.port)),
                *("--save", "", "--appendonly", "no", "--dir", str(self.directory)),
                *("--logfile", str(self.directory / "redis.log")),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not answers("127.0.0.1", self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                log = self.directory / "redis.log"
                tail = log.read_text()[-2000:] if log.exists() else ""
                self.stop()
                raise RuntimeError(f"redis-server did not start on {self.port}: {tail}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@contextlib.contextmanager
def private_redis_server(directory: Path) -> Iterator[RedisServer]:
    """A started ``RedisServer``, stopped at the end; skips (fails under CI) without one."""
    binary = find_redis()
    if binary is None:
        missing("redis-server is not installed (scripts/ensure-redis installs it)")
    server = RedisServer(directory, binary).start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def tier_redis_url(directory: Path) -> Iterator[str]:
    """``$AGENTBUS_TEST_DEDUP_URL`` if it answers, else a private server's URL."""
    url = os.environ.get(ENV_URL)
    if url:
        parts = urlsplit(url)
        if answers(parts.hostname or "127.0.0.1", parts.port or 6379):
            yield url
            return
        if is_required():
            pytest.fail(f"{ENV_URL}={url} does not answer", pytrace=False)
    with private_redis_server(directory) as server:
        yield server.url
