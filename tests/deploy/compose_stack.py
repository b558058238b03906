"""A compose project of the deploy tier: brought up with podman-compose, looked at, torn down.

Each stack is a project of its own name (``agentbus-test-<random>``), so that its
containers, volumes and network are found by that name and all removed afterwards
(``down -v``), also when the test failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from deploy_support import DEPLOY, FIGURES, ROOT, run, timed, tool

COMPOSE: Final = DEPLOY / "compose.yaml"
LOCAL_IMAGES: Final = DEPLOY / "compose.local-images.yaml"
PRODUCTION: Final = DEPLOY / "compose.production.yaml"
AGENTS: Final = ("registry", "leader", "files", "code", "text", "report")
# Everything but Grafana: it has no Debian package, and its public image cannot be pulled here.
OFFLINE_SERVICES: Final = ("rabbitmq", "prometheus", *AGENTS)
AGENTBUS: Final = [sys.executable, "-m", "agentbus"]
SOURCES: Final = ("_config.py", "_topology.py", "_exceptions.py")  # what files and code serve


class _ComposeLoader(yaml.SafeLoader):
    """YAML with compose's merge tags (``!override``, ``!reset``) read as plain values."""


def _untagged(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node)
    return loader.construct_scalar(node)


for _tag in ("!override", "!reset"):
    _ComposeLoader.add_constructor(_tag, _untagged)


def load_compose(path: Path) -> dict[str, Any]:
    """A compose file as written (no merging, no interpolation)."""
    loaded: dict[str, Any] = yaml.load(path.read_text(encoding="utf-8"), _ComposeLoader)
    return loaded


def analysis_plan(title: str) -> dict[str, Any]:
    """List the files, analyse each, summarise, report: files, code, text and report serve it."""
    ids = [f"analyze-{n}" for n in range(len(SOURCES))]
    return {
        "max_parallel": 4,
        "subtasks": [
            {"id": "list", "skill": "list_files", "parameters": {"pattern": "*.py"}},
            *(
                {"id": i, "skill": "analyze_file", "parameters": {"path": p}}
                for i, p in zip(ids, SOURCES, strict=True)
            ),
            {
                "id": "summarise",
                "skill": "digest",
                "depends_on": ids,
                "inputs": {"texts": [f"{i}.docstring" for i in ids]},
            },
            {
                "id": "report",
                "skill": "code_report",
                "depends_on": [*ids, "summarise"],
                "inputs": {"files": ids, "summary": "summarise"},
                "parameters": {"title": title},
            },
        ],
    }


def check_analysis(aggregate: dict[str, Any]) -> None:
    """The plan of ``analysis_plan`` completed, each service doing its part."""
    assert aggregate["status"] == "completed", aggregate
    outcomes = {s["id"]: s for s in aggregate["subtasks"]}
    assert sorted(e["path"] for e in outcomes["list"]["result"]) == sorted(SOURCES)
    served = {s["agents"][0].rsplit("-", 1)[0] for s in outcomes.values()}
    assert served == {"files", "code", "text", "report"}


@dataclass(frozen=True, slots=True)
class Container:
    """One container of the stack."""

    name: str
    service: str
    ip: str


class Stack:
    """The compose project ``name`` of ``files``, run with ``env``."""

    def __init__(self, files: Sequence[Path], env: dict[str, str]) -> None:
        self.name = f"agentbus-test-{uuid.uuid4().hex[:8]}"
        self.env = env
        self.compose = [tool("podman-compose"), "-p", self.name]
        for file in files:
            self.compose += ["-f", str(file)]

    def up(self, services: Sequence[str], *, no_deps: bool = False) -> None:
        """``up -d`` the services (``--no-deps``: not what they depend on)."""
        flags = ["--no-deps"] if no_deps else []
        run([*self.compose, "up", "-d", *flags, *services], env=self.env, timeout=600)

    def containers(self) -> list[Container]:
        """Every container of the project, running or not."""
        podman = tool("podman")
        project = f"label=com.docker.compose.project={self.name}"
        listed = run([podman, "ps", "-a", "--format", "json", "--filter", project], env=self.env)
        found = []
        for row in json.loads(listed.stdout or "[]"):
            name = row["Names"][0]
            inspected = run(
                [podman, "inspect", name, "--format", "{{json .NetworkSettings.Networks}}"],
                env=self.env,
            )
            networks: dict[str, Any] = json.loads(inspected.stdout)
            ip = next(iter(networks.values()), {}).get("IPAddress", "")
            found.append(Container(name, row["Labels"]["com.docker.compose.service"], ip))
        return sorted(found, key=lambda c: c.name)

    def of(self, service: str) -> list[Container]:
        """The containers of ``service``."""
        return [c for c in self.containers() if c.service == service]

    def healthy(self, container: Container) -> bool:
        """Run the container's health check now (podman runs none by itself without systemd)."""
        command = [tool("podman"), "healthcheck", "run", container.name]
        return run(command, env=self.env, check=False).returncode == 0

    def logs(self, container: Container) -> str:
        """Its log: stdout and stderr."""
        done = run([tool("podman"), "logs", container.name], env=self.env, check=False)
        return done.stdout + done.stderr

    def agent_id(self, container: Container) -> str | None:
        """The id of the agent the container runs now: its last "agent started" line."""
        started = None
        for line in self.logs(container).splitlines():
            if line.startswith("{") and '"agent started"' in line:
                started = json.loads(line)["agent_id"]
        return started

    def exec(self, container: Container, *command: str) -> str:
        """Run ``command`` in the container; its stdout."""
        return run([tool("podman"), "exec", container.name, *command], env=self.env).stdout

    def tail(self, lines: int = 15) -> str:
        """The last lines of every container's log, for a failure's message."""
        return "\n".join(
            f"--- {c.name}\n" + "\n".join(self.logs(c).splitlines()[-lines:])
            for c in self.containers()
        )

    def down(self) -> None:
        """``down -v``, then check that no container, volume or network of it is left."""
        run([*self.compose, "down", "-v", "-t", "20"], env=self.env, timeout=300, check=False)
        podman = tool("podman")
        left = [
            f"{kind}: {line}"
            for kind, command in (
                ("container", [podman, "ps", "-a", "--format", "{{.Names}}"]),
                ("volume", [podman, "volume", "ls", "--format", "{{.Name}}"]),
                ("network", [podman, "network", "ls", "--format", "{{.Name}}"]),
            )
            for line in run(command, env=self.env).stdout.splitlines()
            if line.startswith(self.name)
        ]
        assert not left, f"left behind by down -v: {left}"


@contextmanager
def compose_stack(files: Sequence[Path], env: dict[str, str], label: str) -> Iterator[Stack]:
    """A stack of ``files``, torn down afterwards even on failure (timed under ``label``)."""
    stack = Stack(files, env)
    try:
        yield stack
    finally:
        with timed(f"{label}: down -v"):
            stack.down()


def http_json(url: str, timeout: float = 10) -> Any:
    """GET ``url``; its JSON body."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


def compose_env(base: dict[str, str], **settings: str) -> dict[str, str]:
    """The environment of podman-compose: ``base`` without its AGENTBUS_ settings (compose
    interpolates them), and ``settings``."""
    return {k: v for k, v in base.items() if not k.startswith("AGENTBUS_")} | settings


def cli_env(url: str, **settings: str) -> dict[str, str]:
    """The environment of a host-side ``agentbus`` command against ``url``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env |= {"AGENTBUS_URL": url, "AGENTBUS_EXCHANGE": "agentbus", **settings}
    return env


def cli(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``agentbus ARGS`` on the host with ``env`` (see ``cli_env``); not checked."""
    return subprocess.run(
        [*AGENTBUS, *args], capture_output=True, text=True, env=env, input=stdin, timeout=180,
        check=False,
    )  # fmt: skip


def record(what: str, began: float, now: float) -> None:
    """Put a measured span in the tier's timings."""
    FIGURES[what] = f"{now - began:.1f} s"
