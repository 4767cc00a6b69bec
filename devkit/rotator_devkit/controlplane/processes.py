"""Child processes that never outlive the process that started them.

Three layers, because any one can be bypassed: each child gets a parent-death signal (Linux
``PR_SET_PDEATHSIG``: killed when the thread that started it exits, including on SIGKILL of the
parent), runs in its own process group (so :meth:`Child.stop` reaches everything it spawned), and
an ``atexit`` hook in the owner stops whatever is still running at interpreter exit.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class Child:
    """A started child process, its output going to ``log_path``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        with log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only a prctl syscall, fork-safe
            )

    @property
    def pid(self) -> int:
        return self._popen.pid

    def alive(self) -> bool:
        return self._popen.poll() is None

    def returncode(self) -> int | None:
        return self._popen.poll()

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the process group; SIGKILL after ``grace`` seconds."""
        if self._popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._popen.pid, signal.SIGTERM)
        try:
            self._popen.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._popen.pid, signal.SIGKILL)
            self._popen.wait()

    def kill(self) -> None:
        """SIGKILL, no grace: for simulating a crash."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._popen.pid, signal.SIGKILL)
        self._popen.wait()

    def rss_bytes(self) -> int:
        """Resident memory of the process now (Linux), 0 if unknown."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def tail(self, lines: int = 30) -> str:
        """The end of the child's log, for error messages."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
