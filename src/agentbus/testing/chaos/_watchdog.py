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


class _Server:
    """The command run: stopped by SIGTERM, at most until it has been reaped."""

    def __init__(self, argv: list[str], *, watch: bool) -> None:
        self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL if watch else None)
        self._lock = threading.RLock()  # the SIGTERM handler may run inside `reaped`
        self._reaped = False

    def stop(self, *_: object) -> None:
        """SIGTERM the command unless it was reaped (its pid may be another's by then)."""
        with self._lock:
            if not self._reaped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.popen.pid, signal.SIGTERM)

    def reaped(self, wait_status: int) -> int:
        """Record the command's end; return its exit code."""
        with self._lock:
            self._reaped = True
            self.popen.returncode = os.waitstatus_to_exitcode(wait_status)
        return self.popen.returncode


def _reap(server: _Server) -> int:
    """Reap every child until none is left (or the grace after the command); its status."""
    status = 1
    deadline: float | None = None
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG if deadline is not None else 0)
        except ChildProcessError:
            return status  # no children left
        if pid == server.popen.pid:
            status = server.reaped(wait_status)
            deadline = time.monotonic() + _ORPHAN_GRACE
        elif pid == 0:  # helpers still running after the node has gone
            if deadline is not None and time.monotonic() > deadline:
                return status
            time.sleep(0.05)


def main(argv: list[str]) -> int:
    """Run ``argv`` until it exits; SIGTERM it when standard input closes or on SIGTERM."""
    watch = argv[:1] != ["--reap-only"]
    if not watch:
        argv = argv[1:]
    _become_subreaper()
    server = _Server(argv, watch=watch)

    def watch_owner() -> None:
        with contextlib.suppress(OSError):
            sys.stdin.buffer.read()  # returns at EOF: the owner closed the pipe, or died
        server.stop()

    signal.signal(signal.SIGTERM, server.stop)
    if watch:
        threading.Thread(target=watch_owner, daemon=True).start()
    status = _reap(server)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # Not sys.exit: when the node exits by itself, the thread watching the owner is still
    # blocked reading standard input, and the interpreter's shutdown would abort (SIGABRT)
    # on that stream's lock instead of passing the node's exit status on.
    os._exit(code)
