"""What the HTTP faces share: settings under each prefix, keys, the bearer header, schema skills."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from agentbus._exceptions import ConfigurationError, InvalidParameters
from agentbus._http import ANONYMOUS, HttpSettings, SchemaSkill, bearer_key, keys_of
from agentbus.agents import SkillMark

_SHARED = {
    "HOST": ("host", "0.0.0.0"),
    "PORT": ("port", 9999),
    "KEYS_FILE": ("keys_file", "/etc/agentbus/keys.json"),
    "ALLOW_ANONYMOUS": ("allow_anonymous", True),
    "WORKERS": ("workers", 3),
    "REGISTRY": ("registry", "registry-eu"),
    "LEADER": ("leader", "planner"),
    "REFRESH_INTERVAL": ("refresh_interval", 2.5),
    "REQUEST_TIMEOUT": ("request_timeout", 30.0),
}


def _face(name: str) -> tuple[type[HttpSettings], str, int]:
    if name == "gateway":
        pytest.importorskip("a2a")
        from agentbus.gateway import GatewaySettings

        return GatewaySettings, "AGENTBUS_GATEWAY_", 8080
    pytest.importorskip("mcp")
    from agentbus.mcp import McpSettings

    return McpSettings, "AGENTBUS_MCP_", 8090


@pytest.mark.parametrize("face", ["gateway", "mcp"])
def test_each_face_reads_the_shared_settings_under_its_own_prefix(
    face: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AGENTBUS_GATEWAY_* and AGENTBUS_MCP_* set the shared fields, each for its face only."""
    kind, prefix, port = _face(face)
    assert kind().port == port
    other = "AGENTBUS_MCP_" if prefix == "AGENTBUS_GATEWAY_" else "AGENTBUS_GATEWAY_"
    monkeypatch.setenv(f"{other}PORT", "1234")
    monkeypatch.setenv("PORT", "4321")
    assert kind().port == port
    for variable, (_, value) in _SHARED.items():
        monkeypatch.setenv(f"{prefix}{variable}", str(value).lower())
    config = kind()
    assert {field: getattr(config, field) for field, _ in _SHARED.values()} == dict(
        _SHARED.values()
    )


def test_keys_of_reads_the_keys_file_or_lets_anonymous_callers_in(tmp_path: Path) -> None:
    """A keys file names the identities; none means every caller is ``anonymous``."""
    path = tmp_path / "keys.json"
    path.write_text('{"alice-key-0123456789": "alice"}', encoding="utf-8")
    keys = keys_of(HttpSettings(port=1, keys_file=str(path)))
    assert not keys.allow_anonymous
    identity = keys.identify("alice-key-0123456789")
    assert identity is not None
    assert identity.name == "alice"
    assert keys_of(HttpSettings(port=1)).allow_anonymous
    assert ANONYMOUS == "anonymous"
    with pytest.raises(ConfigurationError, match="cannot read API keys"):
        keys_of(HttpSettings(port=1, keys_file=str(tmp_path / "missing.json")))


@pytest.mark.parametrize(
    ("header", "key"),
    [
        ("Bearer k-123", "k-123"),
        ("bearer   k-123  ", "k-123"),
        ("Basic k-123", ""),
        ("Bearer", ""),
        ("", ""),
    ],
)
def test_bearer_key_reads_only_a_bearer_header(header: str, key: str) -> None:
    """The key of ``Bearer <key>``, any case of the scheme; nothing for another scheme."""
    assert bearer_key(header) == key


class _Forwarded(SchemaSkill):
    async def run(self, agent: Any, arguments: dict[str, Any]) -> Any:
        return arguments


def test_a_schema_skill_checks_its_parameters_against_its_schema() -> None:
    """Parameters that fit the schema pass as they are; others name the field that failed."""
    schema = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    skill = _Forwarded(
        SkillMark("echo", "say it back"),
        parameters=schema,
        result={"type": "string"},
        validator=Draft202012Validator(schema),
    )
    assert (skill.name, skill.description) == ("echo", "say it back")
    assert skill.parameters_schema == schema
    assert skill.result_schema == {"type": "string"}
    assert skill.bind({"text": "hi"}) == {"text": "hi"}
    with pytest.raises(InvalidParameters) as refused:
        skill.bind({"text": 3})
    assert refused.value.details["errors"][0]["field"] == "text"
