"""The public API is curated: ``__all__`` is pinned and every name in it exists."""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil

import pytest

import agentbus

EXPECTED_TOP_LEVEL = [
    "AccessRefused",
    "Agent",
    "AgentBusError",
    "AgentCard",
    "Aggregate",
    "Artifact",
    "ArtifactCorrupt",
    "ArtifactError",
    "ArtifactExpired",
    "ArtifactMissing",
    "BrokerUnavailable",
    "Bus",
    "BusClosed",
    "Cancelled",
    "ConfigurationError",
    "ConnectionLost",
    "Envelope",
    "EnvelopeError",
    "ErrorCode",
    "ErrorEnvelope",
    "EventEnvelope",
    "InputRequired",
    "InvalidParameters",
    "Leader",
    "Metrics",
    "NoCapableAgent",
    "NoInstance",
    "PayloadTooLarge",
    "Plan",
    "PlanClient",
    "PublishFailed",
    "Question",
    "QuestionClosed",
    "QuestionDeclined",
    "QuotaExceeded",
    "RemoteError",
    "RequestEnvelope",
    "RequestTimeout",
    "ResponseEnvelope",
    "Settings",
    "SiteUnreachable",
    "SyncBus",
    "TLSError",
    "Transport",
    "TransportError",
    "UnknownAction",
    "Unroutable",
    "UnsupportedVersion",
    "UsageError",
    "__version__",
    "ask",
    "configure_logging",
    "connect",
    "connect_sync",
    "current_request",
    "decode",
    "encode",
    "put_artifact",
    "remember",
    "report_progress",
    "report_usage",
    "send_partial",
    "skill",
]


def test_top_level_all_is_pinned() -> None:
    """agentbus.__all__ is exactly the documented public API."""
    assert agentbus.__all__ == EXPECTED_TOP_LEVEL


EXPECTED_LEADER = [
    "PLAN_PROGRESS",
    "SCHEDULE_CHANGED",
    "SCHEDULE_FIRED",
    "TASK_SUBTASK",
    "Aggregate",
    "Leader",
    "NoCapableAgent",
    "Plan",
    "PlanClient",
    "PlanGraph",
    "PlanRunner",
    "PlanState",
    "PlanStatus",
    "Progress",
    "ProgressReport",
    "RunState",
    "Schedule",
    "ScheduleListing",
    "ScheduleRun",
    "ScheduleState",
    "ScheduledRequest",
    "SkillDirectory",
    "Skip",
    "Stop",
    "Subtask",
    "SubtaskOutcome",
    "SubtaskStatus",
    "Totals",
    "resolve_input",
]


def test_leader_all_is_pinned() -> None:
    """agentbus.leader, a sibling of agentbus.registry, exports the leader's vocabulary."""
    import agentbus.leader

    assert agentbus.leader.__all__ == EXPECTED_LEADER
    assert agentbus.leader.NoCapableAgent is agentbus.NoCapableAgent


def test_the_old_leader_path_is_gone() -> None:
    """The leader moved out of agentbus.agents; no shim is left behind (pre-1.0)."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("agentbus.agents.leader")


EXPECTED_SECURITY = [
    "AuditEntry",
    "AuditPosition",
    "AuditSink",
    "AuditTrail",
    "Refusal",
    "SenderRates",
    "StreamOffset",
    "acting_user",
    "audit_entries",
    "audit_record",
    "default_id",
    "envelope_fields",
    "identity_refusal",
    "login_mechanism",
    "owner_of",
    "publisher_user_id",
    "raw_fields",
    "refusal",
    "tls_context",
    "tls_failure",
    "verifies_sender",
]

EXPECTED_DEFINITIONS = [
    "Grant",
    "credential_secrets",
    "definitions",
    "federation_definitions",
    "federation_resources",
    "link_definitions",
    "secret_name",
    "team_grants",
    "topology_resources",
    "uri_secrets",
]


def test_security_exports_what_the_bus_enforces_and_definitions_what_operators_apply() -> None:
    """Enforcement and the operator's generators are two packages, each with its own names."""
    import agentbus.definitions
    import agentbus.security

    assert agentbus.security.__all__ == EXPECTED_SECURITY
    assert agentbus.definitions.__all__ == EXPECTED_DEFINITIONS


def test_sync_all_is_pinned() -> None:
    """agentbus.sync: the blocking client, its opener (both at the top level too), a plan
    left running."""
    import agentbus.sync

    assert agentbus.sync.__all__ == ["PendingPlan", "SyncBus", "connect_sync"]
    assert agentbus.sync.SyncBus is agentbus.SyncBus
    assert agentbus.sync.connect_sync is agentbus.connect_sync


def _isort_key(name: str) -> tuple[int, str]:
    # isort style, as ruff's RUF022 keeps it: CONSTANTS, then Classes, then functions.
    if name.isupper():
        return 0, name
    if name[:1].isupper():
        return 1, name
    return 2, name


def _public_packages() -> list[str]:
    # Every package users may import: no part of its dotted name starts with "_".
    found = ["agentbus"]
    for info in pkgutil.walk_packages(agentbus.__path__, "agentbus."):
        parts = info.name.split(".")
        if info.ispkg and not any(part.startswith("_") for part in parts):
            found.append(info.name)
    return sorted(found)


PUBLIC_PACKAGES = _public_packages()


def test_the_walk_finds_every_package() -> None:
    """The walk below sees the packages the layout promises (a moved package fails here)."""
    assert {
        "agentbus",
        "agentbus.agents",
        "agentbus.agents.builtin",
        "agentbus.bus",
        "agentbus.cli",
        "agentbus.definitions",
        "agentbus.envelopes",
        "agentbus.leader",
        "agentbus.registry",
        "agentbus.security",
        "agentbus.sync",
        "agentbus.testing",
        "agentbus.testing.chaos",
    } <= set(PUBLIC_PACKAGES)


def test_the_in_memory_fake_and_the_chaos_kit_export_apart() -> None:
    """agentbus.testing is the in-memory fake; the chaos kit's names live in .chaos only."""
    testing = importlib.import_module("agentbus.testing")
    chaos = importlib.import_module("agentbus.testing.chaos")
    assert {"MemoryBroker", "MemoryBus"} <= set(testing.__all__)
    assert {"ChaosProxy", "Ledger", "PrivateBroker"} <= set(chaos.__all__)
    assert not set(testing.__all__) & set(chaos.__all__)


def test_the_chaos_plugin_is_opt_in() -> None:
    """Installing agentbus registers no pytest11 entry point: no plugin loads uninvited."""
    plugins = importlib.metadata.entry_points(group="pytest11")
    assert not [ep for ep in plugins if ep.value.startswith("agentbus")]


@pytest.mark.parametrize("module", PUBLIC_PACKAGES)
def test_all_is_sorted_and_resolves(module: str) -> None:
    """Every public package has an __all__, sorted, and each name in it is importable."""
    mod = importlib.import_module(module)
    names = list(mod.__all__)
    assert names == sorted(names, key=_isort_key)
    for name in names:
        assert hasattr(mod, name), f"{module}.{name} is listed but missing"


@pytest.mark.parametrize("module", PUBLIC_PACKAGES)
def test_public_names_are_not_private(module: str) -> None:
    """Nothing exported is named like a private one."""
    mod = importlib.import_module(module)
    assert not [name for name in mod.__all__ if name.startswith("_") and name != "__version__"]


def test_every_error_is_an_agentbus_error() -> None:
    """Each exception class exported at the top level belongs to one tree."""
    errors = [
        getattr(agentbus, name)
        for name in agentbus.__all__
        if isinstance(getattr(agentbus, name), type)
        and issubclass(getattr(agentbus, name), BaseException)
    ]
    assert len(errors) >= 15
    assert all(issubclass(error, agentbus.AgentBusError) for error in errors)
