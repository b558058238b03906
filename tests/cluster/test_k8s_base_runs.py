"""deploy/k8s/base, run: what each Deployment says, started against a 3-node cluster.

``kubectl kustomize`` renders the base. The test then does what the operators and the
kubelet would (``k8s_pods.py``): it makes each user's Secret with the command users.yaml
names (``agentbus definitions ... --format k8s-secrets``), creates the Users, Permissions,
TopicPermissions and Policies the resources say, puts a Service in front of the private
cluster's nodes, and starts every replica of every Deployment with its args and env, then
runs its startup and readiness probes until they pass. So every pod logs in as its own
service's broker user, with no id given, as it would in the cluster.

Then, as the ``operator`` identity: ``agentbus agents`` lists every pod; the demo's plans
(list the files, analyse each, summarise, report) complete while the node leading the
``code`` service queue is killed (-9): every analysis is answered, no pod dies, and none was
refused anything by the broker (the audit stream included).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from chaos_support import eventually
from k8s_pods import ROOT, Operators, Pod, ServiceProxy, of_kind, pods_of, secret_data

from agentbus.leader import Plan, Subtask
from agentbus.testing.chaos import PrivateCluster
from support.required import missing

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

BASE: Final = ROOT / "deploy" / "k8s" / "base"
SERVICE_HOST: Final = "agentbus-rabbitmq:5672"  # the cluster operator's Service
AGENTBUS: Final = str(Path(sys.executable).parent / "agentbus")
PROGRESS: Final = re.compile(r"\[(\d+)/(\d+)\]")


def _kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        missing("kubectl is not installed: the base cannot be rendered")
    return found


def _render() -> list[dict[str, Any]]:
    done = subprocess.run(
        [_kubectl(), "kustomize", str(BASE)], capture_output=True, text=True, check=True
    )
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def _secrets() -> dict[str, dict[str, str]]:
    """The Secrets, made by the command users.yaml's header names (random passwords)."""
    header = " ".join(
        line.lstrip("#").strip().rstrip("\\")
        for line in (BASE / "users.yaml").read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    )
    found = re.search(r"agentbus definitions (.+?) --format k8s(?!-)", header)
    assert found, "users.yaml names the command that generates it"
    args = [*found.group(1).split(), "--format", "k8s-secrets"]
    done = subprocess.run(
        [AGENTBUS, "definitions", *args], capture_output=True, text=True, check=True
    )
    docs = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    return {doc["metadata"]["name"]: secret_data(doc) for doc in docs}


async def _cli(url: str, *args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    env = {**os.environ, "AGENTBUS_URL": url, "AGENTBUS_EXCHANGE": "agentbus"}
    process = await asyncio.create_subprocess_exec(
        AGENTBUS, *args, env=env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate(stdin)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def _analysis(paths: list[str]) -> Plan:
    """The demo's second plan (agentbus demo): analyse each file, summarise, report."""
    ids = [f"analyze-{n}" for n in range(len(paths))]
    analyses = [
        Subtask(id=i, skill="analyze_file", parameters={"path": p}, retries=1, timeout=60)
        for i, p in zip(ids, paths, strict=True)
    ]
    return Plan(
        max_parallel=4,
        subtasks=[
            *analyses,
            Subtask(
                id="summarise",
                skill="digest",
                depends_on=ids,
                inputs={"texts": [f"{i}.docstring" for i in ids]},
                parameters={"sentences": 3, "top": 8},
            ),
            Subtask(
                id="report",
                skill="code_report",
                depends_on=[*ids, "summarise"],
                inputs={"files": ids, "summary": "summarise"},
                parameters={"title": "k8s base"},
            ),
        ],
    )


async def _run_plan_killing_a_node(
    cluster: PrivateCluster, url: str, plan: Plan
) -> tuple[dict[str, Any], int]:
    """Run ``plan`` with ``agentbus plan run``; kill -9 the code queue's leader mid-plan."""
    env = {**os.environ, "AGENTBUS_URL": url, "AGENTBUS_EXCHANGE": "agentbus"}
    process = await asyncio.create_subprocess_exec(
        AGENTBUS, "plan", "run", "-", "--json", "--timeout", "300", env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdin is not None
    assert process.stderr is not None
    process.stdin.write(plan.model_dump_json().encode())
    process.stdin.close()
    killed = -1
    while line := (await process.stderr.readline()).decode():
        progress = PROGRESS.search(line)
        if progress and killed < 0 and int(progress[1]) < int(progress[2]):
            killed = await cluster.queue_leader("agentbus.service.code")
            await cluster.kill(killed)
    assert process.stdout is not None
    out = await process.stdout.read()
    assert await process.wait() == 0, out.decode()
    assert killed >= 0, "the plan ended before a node could be killed"
    return json.loads(out), killed


async def _listed(url: str, pods: list[Pod]) -> Counter[str] | None:
    """The registry's listing as the operator sees it: agents by service, once all are in."""
    code, out, _err = await _cli(url, "agents", "--json")
    if code != 0:
        return None
    services = Counter(row["service"] for row in json.loads(out))
    wanted = Counter(pod.name.rsplit("-", 1)[0] for pod in pods)
    return services if services & wanted == wanted else None


async def test_the_base_runs_on_a_three_node_cluster(
    private_cluster: PrivateCluster, tmp_path: Path
) -> None:
    docs = _render()
    secrets = _secrets()
    operators = Operators(private_cluster, docs)
    await operators.apply(secrets, tmp_path)
    data = tmp_path / "data"  # the volume files and code serve
    shutil.copytree(ROOT / "src" / "agentbus" / "bus", data, ignore=shutil.ignore_patterns("*.pyc"))
    # list_files lists **/*.py by default: every module, under its folder
    paths = sorted(p.relative_to(data).as_posix() for p in data.glob("**/*.py"))
    async with ServiceProxy([node.port for node in private_cluster.nodes]) as service:
        address = f"127.0.0.1:{service.port}"

        def rewrite(value: str) -> str:
            return value.replace(f"@{SERVICE_HOST}/", f"@{address}/")

        deployments = of_kind(docs, "Deployment")
        pods = list(
            pods_of(
                deployments, of_kind(docs, "ConfigMap"), secrets, tmp_path / "pods",
                rewrite, {"data": data},
            )
        )  # fmt: skip
        try:
            for pod in pods:
                pod.start()
            for pod in pods:
                await eventually(
                    lambda pod=pod: _probe(pod.started), 60, f"{pod.name}'s startup probe"
                )
            for pod in pods:
                await eventually(lambda pod=pod: _probe(pod.ready), 60, f"{pod.name} ready")
            operator = secrets["agentbus-user-operator"]
            url = f"amqp://{operator['username']}:{operator['password']}@{address}/"
            listed = await eventually(lambda: _listed(url, pods), 60, "every pod listed")
            for name, deployment in deployments.items():
                assert listed[name] == deployment["spec"]["replicas"], name

            code, out, err = await _cli(
                url, "plan", "run", "-", "--json", "-q",
                stdin=Plan(subtasks=[Subtask(id="list", skill="list_files")]).model_dump_json()
                .encode(),
            )  # fmt: skip
            assert code == 0, err
            listing = json.loads(out)
            [outcome] = listing["subtasks"]
            assert sorted(e["path"] for e in outcome["result"]) == paths

            aggregate, killed = await _run_plan_killing_a_node(
                private_cluster, url, _analysis(paths)
            )
            assert aggregate["status"] == "completed"
            analysed = [s for s in aggregate["subtasks"] if s["id"].startswith("analyze-")]
            assert len(analysed) == len(paths)
            assert {s["status"] for s in analysed} == {"succeeded"}
            report = next(s for s in aggregate["subtasks"] if s["id"] == "report")
            assert report["status"] == "succeeded"
            assert all(pod.running for pod in pods), "a pod died with the node"

            await private_cluster.start(killed)
            await eventually(lambda: _listed(url, pods), 60, "every pod listed after the kill")
            for pod in pods:  # each user may do all its pod does, the audit stream included
                assert "ACCESS_REFUSED" not in pod.log.read_text(errors="replace"), pod.tail()
        except BaseException:
            sys.stderr.write("\n".join(pod.tail() for pod in pods) + "\n")
            raise
        finally:
            for pod in pods:
                with contextlib.suppress(Exception):
                    pod.stop()
            await operators.remove()


async def _probe(check: Any) -> bool | None:
    return True if await asyncio.to_thread(check) else None
