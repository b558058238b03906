"""Fixtures of the deploy tier: podman's settings and the agentbus image, built once.

The image is built from a Debian base made with debootstrap (scripts/ensure-base-image,
cached by recipe under ~/.cache/agentbus/deploy) and the wheels built on the host
(scripts/build-image), once per session; tests that need it share it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_support import CONTAINERS_CONF, FIGURES, ROOT, run, timed, tool


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/deploy as ``deploy``."""
    for item in items:
        if f"{os.sep}tests{os.sep}deploy{os.sep}" in str(item.path):
            item.add_marker(pytest.mark.deploy)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print what the deploy tier measured (build times, bring-up times)."""
    if FIGURES:
        terminalreporter.section("deploy tier timings")
        for what, figure in FIGURES.items():
            terminalreporter.write_line(f"{what}: {figure}")


@pytest.fixture(scope="session")
def podman_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment podman runs with here: its own CONTAINERS_CONF (runc, ulimits)."""
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text(CONTAINERS_CONF, encoding="utf-8")
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    env["PATH"] = f"{Path(tool('podman')).parent}{os.pathsep}{env.get('PATH', '')}"
    tool("runc")
    return env


@pytest.fixture(scope="session")
def base_image(podman_env: dict[str, str]) -> str:
    """The Debian base the images are built on (debootstrap, cached by recipe); its name."""
    tool("debootstrap")
    with timed("base image (debootstrap, or the cache)"):
        return run(["scripts/ensure-base-image"], timeout=1500, env=podman_env).stdout.strip()


@pytest.fixture(scope="session")
def agentbus_image(podman_env: dict[str, str], base_image: str) -> str:
    """The agentbus image, built with podman from a debootstrap base; its name."""
    tag = "localhost/agentbus:deploy-test"
    with timed("agentbus image (host wheels + podman build)"):
        run(
            ["scripts/build-image", "--base", base_image, "--tag", tag, "--engine", "podman"],
            timeout=1500,
            env=podman_env,
        )
    return tag


@pytest.fixture(scope="session")
def compose_images(podman_env: dict[str, str], base_image: str) -> dict[str, str]:
    """RabbitMQ and Prometheus built here (scripts/build-compose-images): the compose
    environment that selects them (deploy/compose.local-images.yaml)."""
    with timed("rabbitmq + prometheus images (Debian packages, podman build)"):
        done = run(
            ["scripts/build-compose-images", "--base", base_image, "--tag", "deploy-test"],
            timeout=1500,
            env=podman_env,
        )
    rabbitmq, prometheus = done.stdout.split()
    return {"AGENTBUS_RABBITMQ_IMAGE": rabbitmq, "AGENTBUS_PROMETHEUS_IMAGE": prometheus}


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """What compose's files and code agents serve (AGENTBUS_FILES_DIR): a few of agentbus's
    modules, in a directory their container's user can read (pytest's tmp_path is root's)."""
    from compose_stack import SOURCES

    directory = Path(tempfile.mkdtemp(prefix="agentbus-compose-data-"))
    try:
        directory.chmod(0o755)
        for name in SOURCES:
            shutil.copy(ROOT / "src" / "agentbus" / name, directory / name)
            (directory / name).chmod(0o644)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)
