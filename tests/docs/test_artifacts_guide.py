"""docs/artifacts.md's examples, run as written on the in-memory bus."""

from __future__ import annotations

import contextlib
import io
from typing import Any

from doc_blocks import ROOT, blocks

from agentbus.testing import MemoryBroker, MemoryBus

GUIDE = ROOT / "docs" / "artifacts.md"


def _examples() -> list[str]:
    found = [b.text for b in blocks(GUIDE) if b.value == "tests/docs/test_artifacts_guide.py"]
    assert len(found) == 2, "the guide's two tested blocks"
    return found


async def test_the_guide_s_scanner_checks_a_document_and_returns_a_report() -> None:
    """The agent and the caller of the guide: a checksum of a stored document, and a
    report read back by reference, on one in-memory broker."""
    agent_code, caller_code = _examples()
    namespace: dict[str, Any] = {}
    exec(agent_code, namespace)
    exec(caller_code, namespace)
    broker = MemoryBroker()
    printed = io.StringIO()
    async with (
        MemoryBus(broker, agent_id="scanner-1") as serving,
        namespace["Scanner"](bus=serving),
        MemoryBus(broker, agent_id="client-1") as bus,
    ):
        with contextlib.redirect_stdout(printed):
            await namespace["use_scanner"](bus)
    assert printed.getvalue().splitlines() == [
        "checksum True",
        repr(b"line 0\nline 1\nline 2\n"),
    ]
