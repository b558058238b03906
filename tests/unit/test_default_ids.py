"""Default ids: under any login, a process given no id gets one its broker user owns."""

from __future__ import annotations

import re

import pytest

import agentbus
from agentbus import ConfigurationError, Settings
from agentbus.agents import Agent
from agentbus.security import default_id, publisher_user_id, verifies_sender
from agentbus.security._admission import sent_by


class Billing(Agent):
    name = "billing-eu"


def _as(user: str) -> Settings:
    return Settings(url=f"amqp://{user}:secret@broker:5672/")


@pytest.mark.parametrize("role", ["client", "registry", "billing-eu", "gateway"])
def test_as_guest_an_id_is_the_role_and_a_random_part(role: str) -> None:
    """The demo's ids are what they were: readable, the role first."""
    made = default_id(Settings(url="amqp://guest:guest@localhost/"), role)
    assert re.fullmatch(rf"{role}-[0-9a-f]{{8}}", made)


@pytest.mark.parametrize(
    ("user", "role", "form"),
    [
        ("ops", "registry", r"ops-registry_[0-9a-f]{8}"),
        ("ops", "demo-client", r"ops-demo_client_[0-9a-f]{8}"),
        ("team-a", "leader", r"team-a-leader_[0-9a-f]{8}"),
        ("registry", "registry", r"registry-[0-9a-f]{8}"),
        ("billing-eu", "billing-eu", r"billing-eu-[0-9a-f]{8}"),
    ],
)
def test_under_a_verified_user_the_id_is_that_users_and_shows_the_role(
    user: str, role: str, form: str
) -> None:
    """A shared user's ids carry the role after the user; a user per service's, the role."""
    settings = _as(user)
    assert verifies_sender(settings)
    made = default_id(settings, role)
    assert re.fullmatch(form, made), made
    assert sent_by(made, user)
    assert publisher_user_id(settings, made) == user


@pytest.mark.parametrize(("user", "other"), [("ops", "ops-registry"), ("team", "team-a")])
def test_no_default_id_passes_for_another_users(user: str, other: str) -> None:
    """``ops``'s ids are never ``ops-registry``'s, nor ``team``'s ``team-a``'s."""
    for role in ("registry", "a", "client"):
        assert not sent_by(default_id(_as(user), role), other)


def test_a_user_whose_name_cannot_begin_an_id_is_told_to_give_one() -> None:
    """A broker user like ``ops@corp`` owns no id: the error says what to do."""
    with pytest.raises(ConfigurationError, match=r"cannot own agent ids.*--id"):
        default_id(_as("ops%40corp"), "client")


def test_a_bus_and_an_agent_given_no_id_start_as_a_shared_user() -> None:
    """``Bus`` and ``Agent`` pick ids the sender check accepts (no broker needed to see it)."""
    settings = _as("ops")
    bus = agentbus.Bus(settings)
    agent = Billing(settings=settings)
    for made, role in ((bus.agent_id, "client"), (agent.id, "billing_eu")):
        assert made.startswith(f"ops-{role}_")
        assert publisher_user_id(settings, made) == "ops"


def test_a_given_id_of_another_user_is_still_refused() -> None:
    """Giving ``--id`` does not let ``ops`` pass for ``billing``."""
    with pytest.raises(ConfigurationError, match="does not belong to broker user 'ops'"):
        publisher_user_id(_as("ops"), "billing-1")
