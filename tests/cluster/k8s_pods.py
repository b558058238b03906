"""What Kubernetes and its operators would do with deploy/k8s, done on this host.

- ``Operators.apply``: the messaging topology operator's work: each ``User`` made with the
  credentials of the Secret it imports, each ``Permission``, ``TopicPermission`` and
  ``Policy`` set on the cluster (one ``rabbitmqctl import_definitions``), each ``Queue``
  declared (as the operator does, with the cluster's admin user).
- ``ServiceProxy``: the cluster operator's Service: one address, each new connection sent
  to a node that accepts it, in turn (a killed node's connections drop with it).
- ``Pod``: a kubelet's work for one replica of a Deployment: the image's entrypoint with
  the container's args, its env (the ConfigMap, the Secrets' keys, ``$(VAR)`` references),
  its volumes as directories, then the startup probe (``httpGet``) and the readiness probe
  (its ``exec`` command) until they pass. Each pod has a network namespace of its own in
  Kubernetes; here pods share one, so the metrics port is moved to a free one (args and
  probes alike) and the Service's DNS name is replaced by the proxy's address.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aio_pika

from agentbus.testing.chaos import PrivateCluster
from support.ports import free_port

ROOT: Final = Path(__file__).resolve().parents[2]
VENV_BIN: Final = Path(sys.executable).parent
_REFERENCE: Final = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
# The image's ENV (deploy/Dockerfile) and its entrypoint.
_IMAGE_ENV: Final = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
_ENTRYPOINT: Final = [str(VENV_BIN / "agentbus")]
# What the image copies where (deploy/Dockerfile): the probes' commands name these paths.
_IMAGE_FILES: Final = {"/usr/local/bin/agentbus-healthcheck": ROOT / "src/agentbus/_healthcheck.py"}


def of_kind(docs: Sequence[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """The rendered resources of ``kind``, by name."""
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == kind}


def secret_data(secret: Mapping[str, Any]) -> dict[str, str]:
    """A Secret's keys (``stringData``, as ``agentbus definitions --format k8s-secrets`` writes)."""
    return dict(secret.get("stringData", {}))


class Operators:
    """The topology operator's reconciling of Users, Permissions, TopicPermissions, Policies."""

    def __init__(self, cluster: PrivateCluster, docs: Sequence[dict[str, Any]]) -> None:
        self._cluster = cluster
        self._docs = docs
        self.users: dict[str, str] = {}  # User resource name -> broker user
        self.queues: list[str] = []

    async def apply(self, secrets: Mapping[str, Mapping[str, str]], workdir: Path) -> None:
        """Create what the resources say, with the credentials in ``secrets`` (by name).

        One ``rabbitmqctl import_definitions`` for the users, their permissions and the
        policies (an Erlang VM started once, not once a resource); the queues over AMQP."""
        definitions: dict[str, list[dict[str, Any]]] = {
            "users": [], "permissions": [], "topic_permissions": [], "policies": [],
        }  # fmt: skip
        for name, user in of_kind(self._docs, "User").items():
            credentials = secrets[user["spec"]["importCredentialsSecret"]["name"]]
            login = credentials["username"]
            definitions["users"].append(
                {"name": login, "password": credentials["password"], "tags": ""}
            )
            self.users[name] = login
        for permission in of_kind(self._docs, "Permission").values():
            spec = permission["spec"]
            login = self.users[spec["userReference"]["name"]]
            definitions["permissions"].append(
                {"user": login, "vhost": spec["vhost"], **spec["permissions"]}
            )
        for topic in of_kind(self._docs, "TopicPermission").values():
            spec = topic["spec"]
            login = self.users[spec["userReference"]["name"]]
            definitions["topic_permissions"].append(
                {"user": login, "vhost": spec["vhost"], **spec["permissions"]}
            )
        await self._declare_queues()
        for policy in of_kind(self._docs, "Policy").values():
            spec = policy["spec"]
            definitions["policies"].append(
                {
                    "vhost": spec["vhost"], "name": spec["name"], "pattern": spec["pattern"],
                    "apply-to": spec["applyTo"], "priority": spec["priority"],
                    "definition": spec["definition"],
                }
            )  # fmt: skip
        path = workdir / "definitions.json"
        path.write_text(json.dumps(definitions), encoding="utf-8")
        await self._cluster.rabbitmqctl("import_definitions", str(path))

    async def _declare_queues(self) -> None:
        connection = await aio_pika.connect(self._cluster.urls[0])
        async with connection:
            channel = await connection.channel()
            for queue in of_kind(self._docs, "Queue").values():
                spec = queue["spec"]
                arguments = {**spec.get("arguments", {}), "x-queue-type": spec["type"]}
                await channel.declare_queue(
                    spec["name"], durable=spec["durable"], arguments=arguments
                )
                self.queues.append(spec["name"])

    async def remove(self) -> None:
        """Delete what ``apply`` made (the cluster is the session's, shared by other tests)."""
        ctl = self._cluster.rabbitmqctl
        calls = [ctl("delete_user", login) for login in self.users.values()]
        for policy in of_kind(self._docs, "Policy").values():
            calls.append(ctl("clear_policy", "-p", policy["spec"]["vhost"], policy["spec"]["name"]))
        calls += [ctl("delete_queue", name) for name in self.queues]
        await asyncio.gather(*calls, return_exceptions=True)


class ServiceProxy:
    """A Service in front of the cluster's nodes: each connection to the next node that accepts."""

    def __init__(self, ports: Sequence[int]) -> None:
        self._ports = list(ports)
        self._turn = itertools.cycle(range(len(self._ports)))
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    async def __aenter__(self) -> ServiceProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in self._ports:
            port = self._ports[next(self._turn)]
            try:
                upstream = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue
            up_reader, up_writer = upstream
            pipes = [
                asyncio.create_task(self._pipe(reader, up_writer)),
                asyncio.create_task(self._pipe(up_reader, writer)),
            ]
            self._tasks.update(pipes)
            for pipe in pipes:
                pipe.add_done_callback(self._tasks.discard)
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            for pipe in pipes:
                pipe.cancel()
            up_writer.close()
            break
        writer.close()

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await source.read(65536):
                sink.write(chunk)
                await sink.drain()


@dataclass
class Pod:
    """One replica of a Deployment's container, started as its spec says."""

    name: str
    container: dict[str, Any]
    volumes: dict[str, Path]
    env: dict[str, str]
    metrics_port: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    grace: float = 30.0
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.workdir / "pod.log"

    def argv(self) -> list[str]:
        """The entrypoint and the container's args, the metrics port moved."""
        args = [str(self.metrics_port) if a == "9464" else a for a in self.container["args"]]
        return [*(self.container.get("command") or _ENTRYPOINT), *args]

    def start(self) -> None:
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                self.argv(),
                env=self.env,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def started(self) -> bool:
        """The startup probe: ``httpGet`` of its path on the metrics port answers 200."""
        probe = self.container["startupProbe"]["httpGet"]
        url = f"http://127.0.0.1:{self.metrics_port}{probe['path']}"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def ready(self) -> bool:
        """The readiness probe: its ``exec`` command, with the image's files where it names them."""
        command = [
            str(_IMAGE_FILES.get(part, part)) if part.startswith("/") else part
            for part in self.container["readinessProbe"]["exec"]["command"]
        ]
        if command[0] == "python3":
            command[0] = sys.executable
        env = {
            **self.env,
            # The probe finds the port from PID 1's command line in a container.
            "AGENTBUS_HEALTHCHECK_URL": f"http://127.0.0.1:{self.metrics_port}/metrics",
        }
        done = subprocess.run(command, env=env, capture_output=True, timeout=30, check=False)
        return done.returncode == 0

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after the pod's grace period."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=self.grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def tail(self, lines: int = 15) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- {self.name} ---\n" + "\n".join(text.splitlines()[-lines:])


def container_env(
    container: Mapping[str, Any],
    config_maps: Mapping[str, Mapping[str, Any]],
    secrets: Mapping[str, Mapping[str, str]],
    rewrite: Callable[[str], str],
) -> dict[str, str]:
    """The env a container gets: ConfigMaps (``envFrom``), then ``env`` with its references."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(config_maps[source["configMapRef"]["name"]].get("data", {}))
    for item in container.get("env", []):
        if "valueFrom" in item:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = secrets[ref["name"]][ref["key"]]
        else:
            value = _REFERENCE.sub(lambda m: env.get(m.group(1), m.group(0)), item["value"])
            env[item["name"]] = rewrite(value)
    return env


def pods_of(
    deployments: Mapping[str, dict[str, Any]],
    config_maps: Mapping[str, Mapping[str, Any]],
    secrets: Mapping[str, Mapping[str, str]],
    workdir: Path,
    rewrite: Callable[[str], str],
    shared: Mapping[str, Path],
) -> Iterator[Pod]:
    """Every replica of every Deployment, as a ``Pod`` not yet started.

    A volume named in ``shared`` is that directory in every pod (as one ReadOnlyMany
    claim would be); any other is a directory of the pod's own (an ``emptyDir``).
    """
    for name, deployment in sorted(deployments.items()):
        template = deployment["spec"]["template"]["spec"]
        [container] = template["containers"]
        for replica in range(deployment["spec"].get("replicas", 1)):
            pod_dir = workdir / f"{name}-{replica}"
            volumes = {
                v["name"]: shared.get(v["name"], pod_dir / "volumes" / v["name"])
                for v in template["volumes"]
            }
            for path in volumes.values():
                path.mkdir(parents=True, exist_ok=True)
            mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
            env = {
                "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
                "HOME": str(pod_dir),
                **_IMAGE_ENV,
                **container_env(container, config_maps, secrets, rewrite),
            }
            env = {key: str(mounts.get(value, value)) for key, value in env.items()}
            env["TMPDIR"] = str(mounts["/tmp"])
            yield Pod(
                name=f"{name}-{replica}",
                container=container,
                volumes=volumes,
                env=env,
                metrics_port=free_port(),
                workdir=pod_dir,
                grace=float(template.get("terminationGracePeriodSeconds", 30)),
            )
