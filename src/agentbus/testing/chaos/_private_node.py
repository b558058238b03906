"""A private RabbitMQ node for chaos tests: its own name, ports, cookie and data, killable.

The node runs from the installed ``rabbitmq-server`` with everything of its own under a
temporary directory, so a test can kill it, restart it or close its connections without
touching any other broker on the machine (such as a shared ``rabbit@localhost``)::

    with PrivateBroker() as broker:
        ...  # connect to broker.url
        broker.kill()  # SIGKILL of the Erlang VM
        broker.restart()  # same data: durable queues and persistent messages are back

Its methods block while the node starts or a ``rabbitmqctl`` runs (about a second);
from async code, run them in a thread: ``await asyncio.to_thread(broker.restart)``.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final, Self
from urllib.parse import quote

from agentbus.testing.chaos._node_layout import (
    DEBIAN_SBIN,
    SBIN_ENV,
    NodeLayout,
    answers_amqp,
    find_rabbitmq,
    free_port,
)

__all__ = ["BrokerState", "PrivateBroker", "PrivateBrokerError", "TlsListener"]

_WATCHDOG: Final = Path(__file__).with_name("_watchdog.py")


class PrivateBrokerError(RuntimeError):
    """The private node could not be found, started, stopped or driven."""


class BrokerState(enum.Enum):
    """Where a ``PrivateBroker`` is in its life."""

    NEW = "new"  # nothing on disk yet
    RUNNING = "running"
    APP_STOPPED = "app_stopped"  # the Erlang VM runs, the RabbitMQ application does not
    DOWN = "down"  # killed or shut down; the data directory is kept for a restart
    CLOSED = "closed"  # stopped for good; the data directory is gone


@dataclass(frozen=True, slots=True)
class TlsListener:
    """A private node's TLS listener: its CA, certificate and key (PEM files).

    With ``verify_peer`` the node asks each client for a certificate signed by ``ca_file``
    and, with ``require_peer_cert`` too, refuses a client without one.
    """

    ca_file: Path
    cert_file: Path
    key_file: Path
    verify_peer: bool = True
    require_peer_cert: bool = True

    def config(self, port: int) -> dict[str, str]:
        """The ``rabbitmq.conf`` settings of this listener on 127.0.0.1:``port``."""
        return {
            "listeners.ssl.default": f"127.0.0.1:{port}",
            "ssl_options.cacertfile": str(self.ca_file),
            "ssl_options.certfile": str(self.cert_file),
            "ssl_options.keyfile": str(self.key_file),
            "ssl_options.verify": "verify_peer" if self.verify_peer else "verify_none",
            "ssl_options.fail_if_no_peer_cert": str(self.require_peer_cert).lower(),
        }


class PrivateBroker:
    """A RabbitMQ node of a test's own, on free ports, with its data in a temporary directory.

    Args:
        name: The node name's prefix; a random suffix and ``@localhost`` are added.
        start_timeout: Seconds a start (or restart) may take before it fails.
        stop_timeout: Seconds a clean shutdown may take before the node is SIGKILLed.
        config: Extra ``rabbitmq.conf`` settings, e.g. ``{"heartbeat": "5"}``.
        sbin: The directory of ``rabbitmq-server`` and ``rabbitmqctl``; default found.
        node: The full node name, instead of ``name`` with a random suffix.
        cookie: The Erlang cookie (default: a fresh one); a cluster's nodes share one.
        env: Extra environment for the node and its CLI tools (e.g. ``ERL_EPMD_PORT``).
        tls: A TLS listener besides the plain one, on ``tls_port``: its certificates
            and whether it asks clients for theirs.
        plugins: Plugins enabled at start (e.g. ``rabbitmq_auth_mechanism_ssl``).
    """

    def __init__(
        self,
        name: str = "agentbus-chaos",
        *,
        start_timeout: float = 90.0,
        stop_timeout: float = 30.0,
        config: Mapping[str, str] | None = None,
        sbin: Path | None = None,
        node: str | None = None,
        cookie: str | None = None,
        env: Mapping[str, str] | None = None,
        tls: TlsListener | None = None,
        plugins: Sequence[str] = (),
    ) -> None:
        self.node = node or f"{name}-{secrets.token_hex(4)}@localhost"
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.user = self.password = "guest"
        self.port = 0
        self.dist_port = 0
        self.tls_port = 0
        self.tls = tls
        self._plugins = tuple(plugins)
        self.directory: Path | None = None
        self.start_seconds: list[float] = []  # how long each start took, for reports
        self._config = dict(config or {})
        self._cookie = cookie
        self._extra_env = dict(env or {})
        self._sbin = sbin
        self._env: dict[str, str] = {}
        self._process: subprocess.Popen[bytes] | None = None
        self._state = BrokerState.NEW

    def __repr__(self) -> str:
        return f"<PrivateBroker {self.node} port={self.port} state={self._state.value}>"

    @property
    def state(self) -> BrokerState:
        """Where the node is in its life."""
        return self._state

    @property
    def url(self) -> str:
        """The AMQP URL of the node (user guest, default vhost)."""
        if not self.port:
            raise PrivateBrokerError(f"{self!r} has not been started")
        return f"amqp://{self.user}:{self.password}@127.0.0.1:{self.port}/"

    def tls_url(self, user: str | None = None, password: str | None = None) -> str:
        """The ``amqps://`` URL of the TLS listener (host ``localhost``, as its certificate
        names it); without ``user``, none in the URL (for the EXTERNAL login)."""
        if not self.tls_port:
            raise PrivateBrokerError(f"{self!r} has no TLS listener")
        credentials = ""
        if user is not None:
            credentials = quote(user, safe="")
            if password is not None:
                credentials += ":" + quote(password, safe="")
            credentials += "@"
        return f"amqps://{credentials}localhost:{self.tls_port}/"

    @property
    def is_running(self) -> bool:
        """Tell whether the node is up and serving AMQP (as far as this object knows)."""
        return self._state is BrokerState.RUNNING and self._alive()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Start the node (on first use: create its directory, ports and cookie) and wait for it.

        Raises:
            PrivateBrokerError: RabbitMQ is not installed, or the node did not start in time.
        """
        if self._state in (BrokerState.RUNNING, BrokerState.APP_STOPPED, BrokerState.CLOSED):
            raise PrivateBrokerError(f"{self!r} cannot be started now")
        if self._state is BrokerState.NEW:
            self._prepare()
        began = time.monotonic()
        self._spawn()
        try:
            self._await_startup(began + self.start_timeout)
        except BaseException:
            self._halt(stop=True, timeout=10.0)
            raise
        self.start_seconds.append(time.monotonic() - began)
        self._state = BrokerState.RUNNING
        return self

    def kill(self) -> None:
        """SIGKILL the node's Erlang VM, as a crash would; the data directory stays."""
        self._require_process()
        beam = self.beam_pid()
        if beam is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(beam, signal.SIGKILL)
        # The watchdog reaps the VM and its helpers, then exits; SIGKILL all if it does not.
        self._halt(stop=False, timeout=10.0 if beam is not None else 0.0)

    def restart(self) -> None:
        """Start the node again on the same data, ports and name (shut it down first if up)."""
        if self._state in (BrokerState.RUNNING, BrokerState.APP_STOPPED):
            self._halt(stop=True, timeout=self.stop_timeout)
        self.start()

    def shutdown(self) -> None:
        """Shut the node down cleanly, as an operator would; the data directory stays."""
        self._require_process()
        self._halt(stop=True, timeout=self.stop_timeout)

    def ensure_running(self) -> None:
        """Bring the node back to serving, whatever a test left it in."""
        if self._state is BrokerState.APP_STOPPED and self._alive():
            self.start_app()
        elif self._state is not BrokerState.RUNNING or not self._alive():
            self._halt(stop=False, timeout=0.0)
            self.start()

    def stop(self) -> None:
        """Shut the node down (SIGKILL after ``stop_timeout``) and remove its directory."""
        if self._state is BrokerState.CLOSED:
            return
        try:
            self._halt(stop=True, timeout=self.stop_timeout)
        finally:
            self._state = BrokerState.CLOSED
            atexit.unregister(self.stop)
            if self.directory is not None:
                shutil.rmtree(self.directory, ignore_errors=True)

    def close_connections(self, reason: str = "agentbus chaos: forced close") -> None:
        """Close every client connection on the node, as an operator would."""
        self.rabbitmqctl("close_all_connections", "--global", reason)

    def stop_app(self) -> None:
        """Stop the RabbitMQ application (connections close, the port refuses); the VM stays."""
        self._require_process()
        self.rabbitmqctl("stop_app")
        self._state = BrokerState.APP_STOPPED

    def start_app(self) -> None:
        """Start the RabbitMQ application again after ``stop_app`` and wait until it serves."""
        self._require_process()
        self.rabbitmqctl("start_app", timeout=self.start_timeout)  # returns once started
        self._await_startup(time.monotonic() + self.start_timeout, confirm=False)
        self._state = BrokerState.RUNNING

    def beam_pid(self) -> int | None:
        """Return the OS pid of the node's Erlang VM (``beam.smp``), if it runs."""
        process = self._process
        if process is None or process.poll() is not None or self.directory is None:
            return None
        for source in ("file", "node"):
            with contextlib.suppress(OSError, ValueError, PrivateBrokerError):
                if source == "file":
                    text = (self.directory / "node.pid").read_text()
                else:
                    text = self.rabbitmqctl("eval", "os:getpid().", timeout=15)
                pid = int(text.strip().strip('"'))
                if os.getpgid(pid) == process.pid:  # ours: in the watchdog's process group
                    return pid
        return None

    def rabbitmqctl(self, *args: str, timeout: float = 60.0) -> str:
        """Run ``rabbitmqctl -n <node> ARGS`` with the node's cookie; return its output.

        Raises:
            PrivateBrokerError: the command failed or timed out.
        """
        sbin = self._require_sbin()
        ctl = [str(sbin / "rabbitmqctl"), "-q", "-n", self.node, *args]
        command = [sys.executable, "-I", str(_WATCHDOG), "--reap-only", *ctl]
        try:
            done = subprocess.run(
                command,
                env=self._env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise PrivateBrokerError(
                f"rabbitmqctl {' '.join(args)}: no answer in {timeout} s"
            ) from exc
        if done.returncode != 0:
            raise PrivateBrokerError(
                f"rabbitmqctl {' '.join(args)} failed ({done.returncode}): "
                f"{(done.stderr or done.stdout).strip()[-800:]}"
            )
        return done.stdout

    def add_user(
        self,
        name: str,
        password: str,
        *,
        configure: str = ".*",
        write: str = ".*",
        read: str = ".*",
    ) -> str:
        """Create broker user ``name`` with these permissions on ``/``; return its AMQP URL.

        The patterns are RabbitMQ's resource regular expressions (``""``: nothing).
        """
        self.rabbitmqctl("add_user", name, password)
        self.rabbitmqctl("set_permissions", "-p", "/", name, configure, write, read)
        return self.url_for(name, password)

    def set_topic_permissions(
        self, name: str, exchange: str, *, write: str, read: str = ".*"
    ) -> None:
        """Restrict the routing keys ``name`` may publish (``write``) and bind (``read``) on
        topic ``exchange``; ``{username}`` in a pattern stands for the user's name."""
        self.rabbitmqctl("set_topic_permissions", "-p", "/", name, exchange, write, read)

    def delete_user(self, name: str) -> None:
        """Delete broker user ``name``; its connections are closed."""
        self.rabbitmqctl("delete_user", name)

    def url_for(self, user: str, password: str) -> str:
        """The AMQP URL of the node for another user than ``guest``."""
        if not self.port:
            raise PrivateBrokerError(f"{self!r} has not been started")
        return f"amqp://{quote(user, safe='')}:{quote(password, safe='')}@127.0.0.1:{self.port}/"

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the node's standard output and log file, for failure reports."""
        if self.directory is None:
            return ""
        parts = []
        for path in (self.directory / "node.out", self.directory / "log" / f"{self.node}.log"):
            with contextlib.suppress(OSError):
                text = path.read_text(encoding="utf-8", errors="replace").splitlines()
                parts.append(f"--- {path}\n" + "\n".join(text[-lines:]))
        return "\n".join(parts)

    # Internals.

    def _require_sbin(self) -> Path:
        if self._sbin is None:
            self._sbin = find_rabbitmq()
        if self._sbin is None:
            raise PrivateBrokerError(
                "rabbitmq-server is not installed (looked in $AGENTBUS_RABBITMQ_SBIN, "
                f"{DEBIAN_SBIN} and PATH): install it ('apt-get install rabbitmq-server') "
                f"or set {SBIN_ENV} to the directory of rabbitmq-server and rabbitmqctl"
            )
        return self._sbin

    def _require_process(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            raise PrivateBrokerError(f"{self!r} is not running")
        return self._process

    def _alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _prepare(self) -> None:
        config = dict(self._config)
        if self.tls is not None:
            self.tls_port = free_port(set())
            config = {**self.tls.config(self.tls_port), **config}
        layout = NodeLayout.create(
            self.node,
            self._require_sbin(),
            config,
            cookie=self._cookie,
            extra_env=self._extra_env,
            plugins=self._plugins,
        )
        self.directory = layout.directory
        atexit.register(self.stop)
        self.port = layout.port
        self.dist_port = layout.dist_port
        self._env = dict(layout.env)

    def _spawn(self) -> None:
        assert self.directory is not None
        sbin = self._require_sbin()
        with contextlib.suppress(FileNotFoundError):
            (self.directory / "node.pid").unlink()  # a killed node leaves its pid file
        with (self.directory / "node.out").open("ab") as out:
            self._process = subprocess.Popen(
                [sys.executable, "-I", str(_WATCHDOG), str(sbin / "rabbitmq-server")],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=self.directory,
                start_new_session=True,  # its own process group: killable as a whole
            )

    def _await_startup(self, deadline: float, *, confirm: bool = True) -> None:
        while not answers_amqp(self.port):
            if not self._alive():
                code = self._process.returncode if self._process is not None else None
                raise PrivateBrokerError(
                    f"{self.node} exited ({code}) while starting:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise PrivateBrokerError(
                    f"{self.node} did not start within {self.start_timeout} s:\n{self.log_tail()}"
                )
            time.sleep(0.1)
        if not confirm:
            return
        remaining = max(deadline - time.monotonic(), 1.0)
        self.rabbitmqctl(
            "await_startup", "--timeout", str(int(remaining) + 1), timeout=remaining + 10
        )

    def _halt(self, *, stop: bool, timeout: float) -> None:
        """Bring the node down and reap it; SIGKILL its process group after ``timeout``.

        With ``stop``, close the watchdog's standard input first: it SIGTERMs
        ``rabbitmq-server``, which shuts the node down cleanly.
        """
        process = self._process
        if process is None:
            return
        assert process.stdin is not None
        if stop:
            with contextlib.suppress(OSError):
                process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=timeout)
        if process.poll() is None:
            # Not reaped yet, so the process group (led by the watchdog) is certainly ours.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        with contextlib.suppress(OSError):
            process.stdin.close()
        self._process = None
        self._state = BrokerState.DOWN
