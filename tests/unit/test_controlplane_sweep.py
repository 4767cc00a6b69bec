"""The sweep of control-plane folders left behind (rotator_devkit.controlplane.cluster): a
folder is removed once its owner process is gone, but not while it may still be being made.
Found by a CI run whose two pytest workers started their control planes at once: one swept the
other's folder between its ``mkdtemp`` and the ``owner.pid`` written into it, and every test of
that worker failed (``.../pki``: no such file or directory)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from rotator_devkit.controlplane import cluster


def folder(root: Path, name: str, owner: str | None, *, age: float = 0.0) -> Path:
    path = root / f"{cluster._PREFIX}{name}"
    path.mkdir()
    if owner is not None:
        (path / "owner.pid").write_text(owner)
    made = time.time() - age
    os.utime(path, (made, made))
    return path


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_folder_is_swept_once_its_owner_is_gone_and_kept_while_it_lives(tmp_path: Path) -> None:
    gone = folder(tmp_path, "gone", str(dead_pid()))
    live = folder(tmp_path, "live", str(os.getpid()))
    assert cluster.sweep_stale(tmp_path) == [gone]
    assert live.exists()
    assert not gone.exists()


def test_a_folder_that_names_no_owner_yet_is_kept_until_the_grace_has_passed(
    tmp_path: Path,
) -> None:
    """Just made (no ``owner.pid``, or an empty one: the writer not done) is kept; the same
    folder older than the grace (its maker died before naming itself) is swept."""
    new = folder(tmp_path, "new", None)
    half = folder(tmp_path, "half", "")
    old = folder(tmp_path, "old", None, age=cluster.UNOWNED_GRACE + 1)
    assert cluster.sweep_stale(tmp_path) == [old]
    assert new.exists()
    assert half.exists()
    later = time.time() + cluster.UNOWNED_GRACE + 1
    assert sorted(cluster.sweep_stale(tmp_path, now=later)) == sorted([new, half])
