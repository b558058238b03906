"""Where a private RabbitMQ node lives: the installed server, its directory, ports and environment.

``find_rabbitmq`` locates the real ``rabbitmq-server``; ``NodeLayout.create`` lays out a
node of its own under a temporary directory (free ports on 127.0.0.1, a fresh Erlang
cookie, ``rabbitmq.conf`` and every other RabbitMQ file) and builds the environment that
points ``rabbitmq-server`` and ``rabbitmqctl`` at it and at nothing in ``/etc``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["DEBIAN_SBIN", "SBIN_ENV", "NodeLayout", "answers_amqp", "find_rabbitmq", "free_port"]

SBIN_ENV: Final = "AGENTBUS_RABBITMQ_SBIN"
DEBIAN_SBIN: Final = Path("/usr/lib/rabbitmq/bin")  # Debian's wrapper in /usr/sbin su's
_AMQP_HEADER: Final = b"AMQP\x00\x00\x09\x01"
_DROPPED_ENV: Final = frozenset({"ERL_FLAGS", "ERL_AFLAGS", "ERL_ZFLAGS"})
# A shared node's ports (AMQP, distribution, epmd, its CLI tools'): never a private node's.
_RESERVED_PORTS: Final = frozenset({4369, 5672, 25672, *range(35672, 35683)})
_FILES: Final = {  # RABBITMQ_<name>: a path under the node's directory, none in /etc
    "CONF_ENV_FILE": "rabbitmq-env.conf",
    "CONFIG_FILE": "rabbitmq.conf",
    "CONFIG_FILES": "conf.d",
    "ADVANCED_CONFIG_FILE": "advanced.config",
    "ENABLED_PLUGINS_FILE": "enabled_plugins",
    "MNESIA_BASE": "mnesia",
    "LOG_BASE": "log",
    "PID_FILE": "node.pid",
}


def find_rabbitmq() -> Path | None:
    """Return the directory of the real ``rabbitmq-server`` and ``rabbitmqctl``, if installed.

    ``$AGENTBUS_RABBITMQ_SBIN`` first, then Debian's ``/usr/lib/rabbitmq/bin`` (its
    ``/usr/sbin`` scripts switch to the ``rabbitmq`` user and its files), then ``PATH``.
    """
    candidates = [os.environ.get(SBIN_ENV), str(DEBIAN_SBIN)]
    found = shutil.which("rabbitmq-server")
    if found is not None:
        candidates.append(str(Path(found).resolve().parent))
    for candidate in filter(None, candidates):
        sbin = Path(candidate)
        if _is_real_server(sbin):
            return sbin
    return None


def _is_real_server(sbin: Path) -> bool:
    server = sbin / "rabbitmq-server"
    return (
        server.is_file()
        and os.access(server, os.X_OK)
        and (sbin / "rabbitmqctl").is_file()
        and server.resolve().name != "rabbitmq-script-wrapper"
    )


def answers_amqp(port: int) -> bool:
    """Tell whether an AMQP listener answers on 127.0.0.1:port (it sends Connection.Start)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.settimeout(1.0)
            sock.sendall(_AMQP_HEADER)
            return bool(sock.recv(1))
    except OSError:
        return False


def free_port(taken: set[int]) -> int:
    """Return a free port on 127.0.0.1, none in ``taken`` nor a shared node's."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port not in taken and port not in _RESERVED_PORTS:
            return port


@dataclass(frozen=True, slots=True)
class NodeLayout:
    """A node's directory, its AMQP and distribution ports, and the environment to run it in."""

    directory: Path
    port: int
    dist_port: int
    env: Mapping[str, str]

    @classmethod
    def create(
        cls,
        node: str,
        sbin: Path,
        config: Mapping[str, str],
        *,
        cookie: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        plugins: Sequence[str] = (),
    ) -> NodeLayout:
        """Make a temporary directory for ``node`` with its files and cookie, on free ports.

        ``cookie`` is the Erlang cookie (default: a fresh one; a cluster's nodes share
        one), ``extra_env`` extra environment for the node and its CLI tools, ``plugins``
        the plugins enabled when it starts.
        """
        directory = Path(tempfile.mkdtemp(prefix=f"{node.partition('@')[0]}-"))
        port = free_port(set())
        dist_port = free_port({port})
        home = directory / "home"
        for sub in ("home", "mnesia", "log", "conf.d"):
            (directory / sub).mkdir()
        cookie_file = home / ".erlang.cookie"
        cookie_file.write_text(cookie or secrets.token_hex(20).upper())
        cookie_file.chmod(0o400)
        (directory / "enabled_plugins").write_text(f"[{','.join(plugins)}].\n")
        (directory / "rabbitmq-env.conf").write_text("")
        settings = {"log.file.level": "info", "log.console": "false", **config}
        (directory / "rabbitmq.conf").write_text(
            "".join(f"{key} = {value}\n" for key, value in settings.items())
        )
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("RABBITMQ_") and k not in _DROPPED_ENV
        }
        env.setdefault("ERL_EPMD_ADDRESS", "127.0.0.1")  # if this node has to start epmd
        env.update({f"RABBITMQ_{name}": str(directory / sub) for name, sub in _FILES.items()})
        env.update(
            HOME=str(home),  # the node's and rabbitmqctl's cookie: $HOME/.erlang.cookie
            RABBITMQ_HOME=str((sbin / "rabbitmq-server").resolve().parent.parent),
            RABBITMQ_NODENAME=node,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(port),
            RABBITMQ_DIST_PORT=str(dist_port),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
        )
        env.update(extra_env or {})
        return cls(directory=directory, port=port, dist_port=dist_port, env=env)
