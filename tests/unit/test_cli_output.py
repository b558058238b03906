"""A command's output reaches a lagging reader whole, after uvloop ran, stdout unbuffered."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import termios
import time

import pytest

SIZE = 300_000  # over the 64 KiB a pipe holds
LAG = 1.0  # seconds the reader lags once the pipe is full

# The child runs a loop on uvloop, as every agentbus command does, then prints a large
# document: with PYTHONUNBUFFERED, sys.stdout.write alone gives the reader 65,536 bytes.
CHILD = f"""
import sys
from agentbus._loop import run
from agentbus.cli._output import write_out

async def nothing() -> None:
    return None

run(nothing())
write_out("x" * {SIZE})
write_out("end\\n")
"""


def _pipe_full(fd: int) -> bool:
    waiting = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, waiting)
    return int.from_bytes(waiting, sys.byteorder) >= fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)


def test_a_large_output_reaches_a_lagging_reader_whole() -> None:
    pytest.importorskip("uvloop")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "AGENTBUS_LOOP": "uvloop"}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert child.stdout is not None
    try:
        # The reader lags: nothing is read until the child has filled the pipe, and then
        # not for a while (the short write comes once the child's blocked write is woken).
        deadline = time.monotonic() + 60
        while not _pipe_full(child.stdout.fileno()) and child.poll() is None:
            assert time.monotonic() < deadline, "the child never filled the pipe"
            time.sleep(0.01)
        time.sleep(LAG)
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 0, err.decode()
    assert len(out) == SIZE + len("end\n")
    assert out.endswith(b"x" * 10 + b"end\n")
