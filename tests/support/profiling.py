"""Where a running controller spends its CPU: py-spy samples the process from outside (every
thread, no change to the controller, a few per cent of overhead), and the samples are summed by
function. For benchmarks (``python -m tests.bench.scale``), which print the summary."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

RATE = 97
"""Samples per second (py-spy's default is 100; a prime does not beat with periodic work)."""


@dataclass(frozen=True)
class Profile:
    """Samples of the thread holding the GIL (the interpreter's CPU: a thread waiting on a
    socket or a lock holds none), by function: ``own`` where the sample was taken, ``within``
    anywhere on the stack (each function counted once a sample)."""

    samples: int
    own: Counter[str]
    within: Counter[str]

    def top(self, counter: Counter[str], n: int, prefixes: tuple[str, ...] = ()) -> list[str]:
        """The ``n`` functions with the most samples (of those whose file starts with one of
        ``prefixes``, if given), as ``"42.0 %  function (file)"`` lines."""
        rows = [
            (count, frame)
            for frame, count in counter.most_common()
            if not prefixes or any(f"({p}" in frame for p in prefixes)
        ][:n]
        total = self.samples or 1
        return [f"{100 * count / total:5.1f} %  {frame}" for count, frame in rows]


class Sampler:
    """``py-spy record`` attached to ``pid`` until :meth:`stop`. Unavailable (None from
    :meth:`stop`) when py-spy is missing or may not attach (ptrace refused)."""

    def __init__(self, pid: int, workdir: Path) -> None:
        self._out = workdir / f"py-spy-{pid}.txt"
        self._proc: subprocess.Popen[bytes] | None = None
        exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if not Path(exe).exists():
            return
        self._proc = subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--rate", str(RATE), "--format", "raw", "--gil",
             "--nonblocking", "--output", str(self._out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip

    def stop(self) -> Profile | None:
        """Stops sampling and sums what was sampled."""
        if self._proc is None:
            return None
        self._proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            return None
        if not self._out.exists():
            return None
        return summed(self._out.read_text())


def summed(raw: str) -> Profile:
    """py-spy's raw (collapsed) output: one ``frame;frame;…;leaf count`` line per stack."""
    own: Counter[str] = Counter()
    within: Counter[str] = Counter()
    samples = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(f) for f in stack.split(";")[1:]]  # the first is the thread
        if not frames:
            continue
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            within[frame] += count
    return Profile(samples, own, within)


def _short(frame: str) -> str:
    """``fn (/…/site-packages/pkg/mod.py:12)`` → ``fn (pkg/mod.py)``, and a file of the checkout
    relative to it (``controllers/…``): one row per function, whatever the line."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    root = f"{Path.cwd()}/"
    if path.startswith(root):
        path = path[len(root) :]
    elif "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    elif "/lib/python3" in path:
        path = path.split("/lib/python3", 1)[1].split("/", 1)[-1]
    return f"{name} ({path})"
