"""A site's links and permissions as the messaging topology operator's resources, as
docs/sites.md ("On Kubernetes") generates them: every custom resource passes its operator's
published CRD schema, strictly (``crd_schemas.py``), and the Secrets pass
``kubernetes-validate --strict``. tests/unit/test_k8s_sites.py compares their values with
the definitions documents'.
"""

from __future__ import annotations

import copy
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from crd_schemas import LINK_KINDS, schema_errors
from deploy_support import ROOT, run, tool

from agentbus.cli import cli

SITES = ROOT / "docs" / "sites.md"
MARK = "<!-- tested-by: tests/deploy/test_k8s_site_resources.py -->"


def _commands() -> list[list[str]]:
    """The ``agentbus`` commands of the docs' block: continued lines joined, each cut at
    its redirection or pipe."""
    lines = SITES.read_text(encoding="utf-8").splitlines()
    start = lines.index(MARK) + 1
    assert lines[start] == "```sh"
    end = lines.index("```", start + 1)
    text = "\n".join(lines[start + 1 : end]).replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        words = shlex.split(line)
        for stop in ("|", ">"):
            words = words[: words.index(stop)] if stop in words else words
        if words and words[0] == "agentbus":
            commands.append(words[1:])
    return commands


def _generate(args: list[str]) -> list[dict[str, Any]]:
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, f"agentbus {shlex.join(args)}: {done.output}"
    return [doc for doc in yaml.safe_load_all(done.output) if doc]


def _documented() -> list[dict[str, Any]]:
    return [doc for command in _commands() for doc in _generate(command)]


def _custom(resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in resources if r["apiVersion"] != "v1"]


def test_the_docs_resources_pass_the_operators_schemas() -> None:
    """The block's four commands make links and grants the operator accepts, and the
    Secrets its Federations and Users read."""
    commands = _commands()
    assert [c[0] for c in commands] == ["definitions", "federation"] * 2
    resources = _documented()
    custom = _custom(resources)
    assert {(r["apiVersion"], r["kind"]) for r in custom} >= LINK_KINDS
    for resource in custom:
        where = f"{resource['kind']}/{resource['metadata']['name']}"
        assert schema_errors(resource) == [], where
    secrets = {r["metadata"]["name"] for r in resources if r["kind"] == "Secret"}
    for resource in custom:
        spec = resource["spec"]
        read = spec.get("uriSecret", spec.get("importCredentialsSecret"))
        assert read is None or read["name"] in secrets, resource["metadata"]["name"]
    assert {"agentbus-site-us-uri", "agentbus-user-fed-us"} <= secrets


@pytest.mark.parametrize(
    "args",
    [
        ["federation", "eu", "--peer", "us", "--peer", "ap", "--vhost", "team"],
        ["federation", "eu", "--peer", "us", "--link-message-ttl", "120", "--cluster", "b"],
        shlex.split(
            "definitions registry leader --client ops=billing --auditor ops --dashboard ops"
            " --peer-site us=fed-us --peer-site ap"
        ),
    ],
    ids=["three-sites", "a-capped-link", "grants-for-two-peers"],
)
def test_every_resource_passes_its_schema(args: list[str]) -> None:
    """Other shapes than the docs': more peers, a vhost, a message TTL, more users."""
    resources = _generate([*args, "--format", "k8s"])
    assert resources
    for resource in resources:
        where = f"{resource['kind']}/{resource['metadata']['name']}"
        assert schema_errors(resource) == [], where


@pytest.mark.parametrize(
    ("kind", "key", "value"),
    [
        ("Federation", "maxhops", 1),  # misspelt
        ("Federation", "ackMode", "on_confirm"),  # not in the enum
        ("Federation", "uriSecret", None),  # required
        ("Federation", "uri", "amqp://rabbit.us"),  # no such field: the URI is a Secret's
        ("Federation", "messageTTL", "120s"),
        ("Binding", "destinationType", "exchanges"),
        ("Exchange", "internal", False),  # no such field
        ("Queue", "durable", "yes"),
        ("Policy", "applyTo", "exchange"),
    ],
)
def test_the_schema_check_has_teeth(kind: str, key: str, value: object) -> None:
    """A misspelt field, one the kind lacks, a missing required one, a wrong value: refused."""
    resources = _generate(["federation", "eu", "--peer", "us", "--format", "k8s"])
    resource = copy.deepcopy(next(r for r in resources if r["kind"] == kind))
    assert schema_errors(resource) == []
    if value is None:
        del resource["spec"][key]
    else:
        resource["spec"][key] = value
    assert schema_errors(resource) != []


def test_the_secrets_pass_kubernetes_validate(tmp_path: Path) -> None:
    """The users' and the URIs' Secrets are valid Secrets, strictly."""
    secrets = [r for r in _documented() if r["kind"] == "Secret"]
    path = tmp_path / "secrets.yaml"
    path.write_text(yaml.safe_dump_all(secrets), encoding="utf-8")
    done = run([tool("kubernetes-validate"), "--strict", str(path)], check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    for secret in secrets:
        assert f"passed for resource secret/{secret['metadata']['name']}" in done.stdout
