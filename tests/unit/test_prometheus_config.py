"""The shipped Prometheus configuration (deploy/prometheus/prometheus.yml) is valid."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from support.required import missing

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "prometheus.yml"


def _promtool() -> str:
    """promtool next to $AGENTBUS_PROMETHEUS, else on PATH; skip without it (fail under CI)."""
    candidates = []
    if prometheus := os.environ.get("AGENTBUS_PROMETHEUS"):
        candidates.append(str(Path(prometheus).with_name("promtool")))
    candidates += [shutil.which("promtool") or "", "/usr/bin/promtool"]
    found = next((c for c in candidates if c and os.access(c, os.X_OK)), None)
    if found is None:
        missing(
            "promtool (Debian package prometheus) is needed; "
            "./scripts/ensure-prometheus installs it"
        )
    return found


def test_promtool_accepts_the_deploy_config() -> None:
    """`promtool check config` passes on deploy/prometheus/prometheus.yml."""
    done = subprocess.run(
        [_promtool(), "check", "config", str(CONFIG)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_deploy_config_scrapes_the_demo_ports() -> None:
    """The agentbus job scrapes localhost:9464 (registry) to 9471 every 5 s."""
    text = CONFIG.read_text(encoding="utf-8")
    targets = re.findall(r"^\s*-\s*(localhost:\d+)", text, flags=re.MULTILINE)
    assert targets == [f"localhost:{port}" for port in range(9464, 9472)]
    assert re.search(r"^\s*-\s*job_name:\s*agentbus\s*$", text, flags=re.MULTILINE)
    assert re.search(r"^\s*scrape_interval:\s*5s\s*$", text, flags=re.MULTILINE)
