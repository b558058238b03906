"""Run a RabbitMQ node for its owner, and stop it when the owner goes.

Run as a script (``python -I _watchdog.py rabbitmq-server``), never imported by agentbus:
``PrivateBroker`` starts it in a new session with a pipe on standard input. The watchdog

- starts the command (the foreground ``rabbitmq-server``) as its child;
- stops the node cleanly (SIGTERM, which ``rabbitmq-server`` turns into a clean shutdown)
  when the pipe closes: the owner asked for a stop, or the owner died, even by SIGKILL;
- is a child subreaper (Linux), so the Erlang VM's helpers (``erl_child_setup``,
  ``inet_gethost``), orphaned when the VM is SIGKILLed, are reaped here rather than left
  as zombies under an init that may not reap them;
- exits with the node's exit status once the node and its helpers are gone.

With ``--reap-only`` first (for ``rabbitmqctl``, whose VM orphans helpers too), it only
runs the command, reaps, and passes the exit status on.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

_PR_SET_CHILD_SUBREAPER = 36
_ORPHAN_GRACE = 2.0  # seconds to reap helpers after the node has gone (a daemonised epmd stays)


def _become_subreaper() -> None:
    with contextlib.suppress(Exception):  # Linux only; elsewhere orphans go to init as usual
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def main(argv: list[str]) -> int:
    """Run ``argv`` until it exits; SIGTERM it when standard input closes or on SIGTERM."""
    watch = argv[:1] != ["--reap-only"]
    if not watch:
        argv = argv[1:]
    _become_subreaper()
    server = subprocess.Popen(argv, stdin=subprocess.DEVNULL if watch else None)
    lock = threading.Lock()
    reaped = False

    def stop_server(*_: object) -> None:
        with lock:
            if not reaped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(server.pid, signal.SIGTERM)

    def watch_owner() -> None:
        with contextlib.suppress(OSError):
            sys.stdin.buffer.read()  # returns at EOF: the owner closed the pipe, or died
        stop_server()

    signal.signal(signal.SIGTERM, stop_server)
    if watch:
        threading.Thread(target=watch_owner, daemon=True).start()
    status = 1
    deadline: float | None = None
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG if deadline is not None else 0)
        except ChildProcessError:
            break  # no children left
        if pid == 0:  # helpers still running after the node has gone
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(0.05)
            continue
        if pid == server.pid:
            with lock:
                reaped = True
                server.returncode = os.waitstatus_to_exitcode(wait_status)
            status = server.returncode
            deadline = time.monotonic() + _ORPHAN_GRACE
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
