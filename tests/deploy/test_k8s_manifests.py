"""deploy/k8s renders with kustomize and validates against Kubernetes' schemas.

``kubectl kustomize`` renders the base and the production overlay; ``kubernetes-validate
--strict`` checks every built-in kind (Deployments, PodDisruptionBudgets, ConfigMap,
Namespace) against the API schemas, rejecting unknown fields. The custom resources
(RabbitmqCluster, the topology operator's Policy, User, Permission and TopicPermission, the
Prometheus Operator's PodMonitor and PrometheusRule) are checked against the operators'
published CRD schemas (``crd_schemas.py``), strictly, and their meaning here: the policies
are those of deploy/rabbitmq/definitions.json, the users those ``agentbus definitions``
generates, the rules those of deploy/prometheus/alerts.yml, the PodMonitor selects every
agent pod's ``metrics`` port, each agent reads its own user's Secret and the cluster
operator's Service.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from crd_schemas import LINK_KINDS, custom_kinds, schema_errors
from deploy_support import DEPLOY, run, tool

import agentbus
from agentbus.cli import cli

K8S = DEPLOY / "k8s"
AGENTS = {"registry", "leader", "files", "code", "text", "report"}


def _render(path: Path) -> list[dict[str, Any]]:
    done = run([tool("kubectl"), "kustomize", str(path)], timeout=120)
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module", params=["base", "overlays/production"])
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One kustomization rendered to a file."""
    out = tmp_path_factory.mktemp("k8s") / "rendered.yaml"
    out.write_text(yaml.safe_dump_all(_render(K8S / request.param)), encoding="utf-8")
    return out


def _docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def _of(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == kind}


def test_kubernetes_validate_strict_passes(rendered: Path) -> None:
    """Every built-in resource is valid, strictly; only the custom kinds go unvalidated."""
    done = run([tool("kubernetes-validate"), "--strict", str(rendered)], check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    output = done.stdout + done.stderr
    builtin = [d for d in _docs(rendered) if "." not in d["apiVersion"].split("/")[0]]
    builtin += [d for d in _docs(rendered) if d["apiVersion"].startswith(("apps/", "policy/"))]
    for doc in builtin:
        assert f"passed for resource {doc['kind'].lower()}/{doc['metadata']['name']}" in output
    skipped = [line for line in output.splitlines() if "Couldn't find schema" in line]
    unvalidated = {line.split("kind ")[1].split(" ")[0] for line in skipped}
    custom = {"RabbitmqCluster", "Policy", "User", "Permission", "TopicPermission", "Queue"}
    assert unvalidated <= custom | {"PodMonitor", "PrometheusRule"}


def test_custom_resources_match_the_operators_published_schemas(rendered: Path) -> None:
    """Every custom resource validates, strictly, against its operator's CRD schema."""
    docs = [d for d in _docs(rendered) if "." in d["apiVersion"].split("/")[0]]
    kinds = {(d["apiVersion"], d["kind"]) for d in docs}
    assert kinds == custom_kinds() - LINK_KINDS, "a kind without its schema in tests/deploy/crds"
    for doc in docs:
        assert schema_errors(doc) == [], f"{doc['kind']}/{doc['metadata']['name']}"


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        ("User", ("spec", "importCredentialSecret"), {"name": "x"}),  # misspelt
        ("TopicPermission", ("spec", "permissions", "exchange"), None),  # required
        ("RabbitmqCluster", ("spec", "replicas"), "three"),
        ("PodMonitor", ("spec", "podMetricsEndpoints", 0, "portt"), "metrics"),
    ],
)
def test_the_crd_check_has_teeth(
    rendered: Path, kind: str, path: tuple[str | int, ...], value: object
) -> None:
    """A misspelt field, a missing required one, a wrong type: each is refused."""
    doc = next(d for d in _docs(rendered) if d["kind"] == kind)
    node: Any = doc
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    assert schema_errors(doc) != []


_USERS_COMMAND = (
    "registry leader agentbus.agents.builtin:FilesAgent agentbus.agents.builtin:CodeAgent "
    "agentbus.agents.builtin:TextAgent agentbus.agents.builtin:ReportAgent "
    "--client operator=registry,leader --auditor operator --dashboard operator"
)


def test_the_users_are_those_agentbus_definitions_generates() -> None:
    """deploy/k8s/base/users.yaml is the output of the command its header names."""
    text = (K8S / "base" / "users.yaml").read_text(encoding="utf-8")
    header = " ".join(line.strip("# \\") for line in text.splitlines() if line.startswith("#"))
    assert " ".join(_USERS_COMMAND.split()) in " ".join(header.split())
    done = CliRunner().invoke(cli, ["definitions", *_USERS_COMMAND.split(), "--format", "k8s"])
    assert done.exit_code == 0, done.output
    expected = [d for d in yaml.safe_load_all(done.output) if d]
    assert [d for d in yaml.safe_load_all(text) if d] == expected


@pytest.mark.parametrize("doc", [DEPLOY / "README.md", DEPLOY.parent / "docs" / "production.md"])
def test_the_docs_make_the_secrets_of_those_users(doc: Path) -> None:
    """The docs' Secrets command names the same team as users.yaml."""
    text = doc.read_text(encoding="utf-8").replace("\\\n", " ")
    line = next(ln for ln in text.splitlines() if "--format k8s-secrets | kubectl" in ln)
    assert " ".join(_USERS_COMMAND.split()) in " ".join(line.split())


def test_each_deployment_logs_in_as_its_own_user(rendered: Path) -> None:
    """A Deployment reads the Secret its service's User imports; no pod shares a user."""
    docs = _docs(rendered)
    users = _of(docs, "User")
    imported = {u["spec"]["importCredentialsSecret"]["name"]: n for n, u in users.items()}
    for name, deployment in _of(docs, "Deployment").items():
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        refs = [i["valueFrom"]["secretKeyRef"] for i in container["env"] if "valueFrom" in i]
        assert {ref["name"] for ref in refs} == {f"agentbus-user-{name}"}
        assert {ref["key"] for ref in refs} == {"username", "password"}
        assert f"agentbus-user-{name}" in imported
    for kind in ("Permission", "TopicPermission"):
        for resource in _of(docs, kind).values():
            assert resource["spec"]["userReference"]["name"] in users


def test_kubernetes_validate_rejects_an_unknown_field(rendered: Path, tmp_path: Path) -> None:
    """The check has teeth: a misspelt Deployment field fails --strict."""
    docs = _docs(rendered)
    deployment = next(doc for doc in docs if doc["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    done = run([tool("kubernetes-validate"), "--strict", str(broken)], check=False)
    assert done.returncode != 0


def test_every_agent_is_probed_bounded_unprivileged_and_budgeted(rendered: Path) -> None:
    """Each Deployment: probes, resource requests, non-root, metrics port, a PDB selecting it."""
    docs = _docs(rendered)
    deployments, budgets = _of(docs, "Deployment"), _of(docs, "PodDisruptionBudget")
    assert set(deployments) == AGENTS
    dockerfile = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        [container] = pod["spec"]["containers"]
        assert container["resources"]["requests"].keys() == {"cpu", "memory"}
        assert {"name": "metrics", "containerPort": 9464, "protocol": "TCP"} in container["ports"]
        assert container["args"][-2:] == ["--metrics-port", "9464"]
        assert container["livenessProbe"]["httpGet"]["port"] == "metrics"
        readiness = container["readinessProbe"]["exec"]["command"]
        assert " ".join(json.dumps(part) for part in readiness) in dockerfile.replace(", ", " ")
        selector = budgets[name]["spec"]["selector"]["matchLabels"]
        assert selector.items() <= pod["metadata"]["labels"].items()
        assert deployment["spec"]["selector"]["matchLabels"].items() <= selector.items()


def test_agents_reach_the_cluster_the_operator_makes(rendered: Path) -> None:
    """3 quorum-default replicas; the agents use its Service, each with its own user."""
    docs = _docs(rendered)
    [(cluster_name, cluster)] = _of(docs, "RabbitmqCluster").items()
    assert cluster["spec"]["replicas"] == 3
    assert "default_queue_type = quorum" in cluster["spec"]["rabbitmq"]["additionalConfig"]
    settings = next(
        d for n, d in _of(docs, "ConfigMap").items() if n.startswith("agentbus-settings")
    )
    assert settings["data"]["AGENTBUS_QUEUE_TYPE"] == "quorum"
    for deployment in _of(docs, "Deployment").values():
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        env = {item["name"]: item for item in container["env"]}
        refs = [item["valueFrom"]["secretKeyRef"] for item in env.values() if "valueFrom" in item]
        assert {ref["name"] for ref in refs} == {f"agentbus-user-{deployment['metadata']['name']}"}
        assert f"@{cluster_name}:5672/" in env["AGENTBUS_URL"]["value"]
        assert container["envFrom"] == [{"configMapRef": {"name": settings["metadata"]["name"]}}]


def test_policies_are_those_of_the_definitions(rendered: Path) -> None:
    """The Policy resources carry exactly the policies of deploy/rabbitmq/definitions.json."""
    docs = _docs(rendered)
    [cluster_name] = _of(docs, "RabbitmqCluster")
    definitions = json.loads((DEPLOY / "rabbitmq" / "definitions.json").read_text("utf-8"))
    expected = {
        p["name"]: (p["vhost"], p["pattern"], p["apply-to"], p["priority"], p["definition"])
        for p in definitions["policies"]
    }
    policies = {}
    for doc in _of(docs, "Policy").values():
        spec = doc["spec"]
        assert spec["rabbitmqClusterReference"] == {"name": cluster_name}
        policies[spec["name"]] = (
            spec["vhost"], spec["pattern"], spec["applyTo"], spec["priority"], spec["definition"]
        )  # fmt: skip
    assert policies == expected


def test_the_pod_monitor_scrapes_every_agent(rendered: Path) -> None:
    """The agentbus PodMonitor's selector matches every agent pod, on its `metrics` port."""
    docs = _docs(rendered)
    monitor = _of(docs, "PodMonitor")["agentbus"]
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics"
    [expression] = monitor["spec"]["selector"]["matchExpressions"]
    assert expression["operator"] == "In"
    for deployment in _of(docs, "Deployment").values():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels[expression["key"]] in expression["values"]


def test_the_production_overlay_pins_the_image_and_scales_out() -> None:
    """The overlay: every resource in its namespace, the release's image, more code workers."""
    docs = _render(K8S / "overlays" / "production")
    namespaced = [d for d in docs if d["kind"] != "Namespace"]
    assert {d["metadata"].get("namespace") for d in namespaced} == {"agentbus"}
    deployments = _of(docs, "Deployment")
    images = {d["spec"]["template"]["spec"]["containers"][0]["image"] for d in deployments.values()}
    assert images == {f"registry.example.com/agentbus:{agentbus.__version__}"}
    assert deployments["code"]["spec"]["replicas"] == 4
    cluster = next(iter(_of(docs, "RabbitmqCluster").values()))
    assert cluster["spec"]["replicas"] == 3
    assert cluster["spec"]["persistence"]["storage"] == "50Gi"


def test_the_prometheus_rule_carries_the_alerts(rendered: Path) -> None:
    """The PrometheusRule's groups are exactly those of deploy/prometheus/alerts.yml."""
    [rule] = _of(_docs(rendered), "PrometheusRule").values()
    alerts = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text(encoding="utf-8"))
    assert rule["spec"]["groups"] == alerts["groups"]
