"""How ./scripts/test shares the tiers out among pytest-xdist's workers (tests/support/tiers.py)."""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

from support.tiers import TESTS, scope_of, tier_of


def test_a_tier_that_starts_nodes_is_one_work_unit_and_unit_tests_each_their_own() -> None:
    """chaos, cluster, deploy ... whole; integration and docs by module; unit by test."""
    assert scope_of("tests/chaos/test_faults.py::test_x") == "tests/chaos"
    assert scope_of("tests/cluster/test_nemesis.py::test_nemesis") == "tests/cluster"
    assert scope_of("tests/integration/test_bus.py::test_y[rabbitmq]") == (
        "tests/integration/test_bus.py"
    )
    assert scope_of("tests/docs/test_site.py::test_z") == "tests/docs/test_site.py"
    unit = "tests/unit/test_codec.py::test_round_trip[1]"
    assert scope_of(unit) == unit


def test_xdist_still_splits_scopes_through_the_method_the_scheduler_overrides() -> None:
    """The seam: xdist's LoadScopeScheduling asks ``_split_scope`` for each test's unit."""
    assert callable(getattr(LoadScopeScheduling, "_split_scope", None))
    assert LoadScopeScheduling._split_scope(None, "tests/a.py::test_b") == "tests/a.py"  # type: ignore[arg-type]


def test_a_test_module_belongs_to_the_folder_it_is_in() -> None:
    assert tier_of(TESTS / "chaos" / "test_faults.py") == "chaos"
    assert tier_of(TESTS / "conftest.py") == "top"
