"""The operators' published CRD schemas, checked the way the Kubernetes API server checks them.

``crds/`` holds the ``openAPIV3Schema`` of each custom kind deploy/k8s uses, taken from the
operators' repositories (each file names its source and commit; descriptions removed):
the RabbitMQ cluster operator (``RabbitmqCluster``), the messaging topology operator
(``User``, ``Permission``, ``TopicPermission``, ``Policy``, ``Queue``; and ``Exchange``,
``Binding``, ``Federation``, which only a site's links use: ``LINK_KINDS``) and the
Prometheus Operator (``PodMonitor``, ``PrometheusRule``).

A CRD schema is a *structural* schema: the API server prunes (or, with
``kubectl apply --validate=strict``, rejects) any field the schema does not declare, unless
a node says ``x-kubernetes-preserve-unknown-fields``. JSON Schema allows unknown fields by
default, so ``strict_schema`` closes every object that declares its properties, and reads
the ``x-kubernetes-int-or-string`` and ``nullable`` extensions.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, Final

import jsonschema

CRDS: Final = Path(__file__).resolve().parent / "crds"
LINK_KINDS: Final = frozenset(
    ("rabbitmq.com/v1beta1", kind) for kind in ("Exchange", "Binding", "Federation")
)
"""The kinds only ``agentbus federation --format k8s`` makes (deploy/k8s has none)."""


def strict_schema(node: Any) -> Any:
    """The JSON Schema that accepts what the API server accepts for structural ``node``."""
    if isinstance(node, list):
        return [strict_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    schema = {key: strict_schema(value) for key, value in node.items()}
    if schema.pop("x-kubernetes-int-or-string", False):
        schema.pop("type", None)
        schema["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.pop("nullable", False) and "type" in schema:
        schema["type"] = [schema["type"], "null"]
    preserve = schema.pop("x-kubernetes-preserve-unknown-fields", False)
    declares = "properties" in schema and "additionalProperties" not in schema
    if declares and not preserve:
        schema["additionalProperties"] = False
    return schema


@cache
def _validators() -> dict[tuple[str, str], jsonschema.Draft7Validator]:
    found = {}
    for path in sorted(CRDS.glob("*.json")):
        crd = json.loads(path.read_text(encoding="utf-8"))
        for version, schema in crd["versions"].items():
            api_version = f"{crd['group']}/{version}"
            found[(api_version, crd["kind"])] = jsonschema.Draft7Validator(strict_schema(schema))
    return found


def custom_kinds() -> set[tuple[str, str]]:
    """The (apiVersion, kind) pairs there is a published schema for."""
    return set(_validators())


def schema_errors(resource: dict[str, Any]) -> list[str]:
    """What the API server would refuse in ``resource`` (empty: it is valid)."""
    key = (resource["apiVersion"], resource["kind"])
    validator = _validators().get(key)
    if validator is None:
        return [f"no published schema for {key}"]
    errors = sorted(validator.iter_errors(resource), key=lambda e: list(e.absolute_path))
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]
