"""A Secret's data laid into a folder the way the kubelet's AtomicWriter
(``k8s.io/kubernetes/pkg/volume/util/atomic_writer.go``) lays a Secret volume, so that a test
(or ``rotator dev``) of a consumer that reloads on change (Envoy's ``watched_directory``) sees,
on a local disk, the same sequence of file-system events as in a Pod, without a kubelet:

* each version in a new hidden directory ``..<UTC timestamp>.<random digits>`` (``0755``), its
  files ``0644`` (a Secret volume's ``defaultMode``);
* ``..data_tmp``, a symlink to that directory, renamed over ``..data``: the one atomic step, so
  a reader sees the whole old version or the whole new one, never a mix;
* ``<key> -> ..data/<key>`` for every key (made once: it resolves through ``..data``, so it
  follows each swap without being touched);
* after the swap, the links of keys no longer present removed, then the previous version's
  directory.

A payload equal to what is there (same keys, same bytes) writes nothing, as the kubelet's
``shouldWritePayload`` decides: no new directory, no swap, no event for a watcher. Keys are
refused where the kubelet (and the API's Secret key validation) would refuse them: empty, with
a ``/``, ``.``, or starting with ``..`` (that prefix is the writer's own namespace).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path

DATA = "..data"
DATA_TMP = "..data_tmp"
FILE_MODE = 0o644
DIR_MODE = 0o755
MAX_KEY = 255


def validate_key(key: str) -> None:
    """Raises ValueError for a key the kubelet would not project: the writer reserves names
    starting with ``..``; a ``/`` would reach outside the flat layout a Secret volume has."""
    if not key:
        raise ValueError("invalid key: must not be empty")
    if "/" in key or "\0" in key:
        raise ValueError(f"invalid key {key!r}: must not contain '/'")
    if key == "." or key.startswith(".."):
        raise ValueError(f"invalid key {key!r}: must not be '.' or start with '..'")
    if len(key) > MAX_KEY:
        raise ValueError(f"invalid key: longer than {MAX_KEY} characters")


class AtomicWriter:
    """Writes versions of one Secret's data into ``target`` (created if missing)."""

    def __init__(self, target: Path) -> None:
        self.target = target
        target.mkdir(parents=True, exist_ok=True)

    def current(self) -> Path | None:
        """The version directory ``..data`` points at now; None before the first write."""
        try:
            return self.target / os.readlink(self.target / DATA)
        except FileNotFoundError:
            return None

    def write(
        self, data: Mapping[str, bytes], *, after_swap: Callable[[], None] | None = None
    ) -> bool:
        """Projects ``data`` as the new version; True when anything changed on disk, False when
        ``data`` equals the version there (nothing is written, as by the kubelet).

        ``after_swap`` runs between the rename of ``..data`` and the links of new keys: the
        moment a reader woken by the rename may read, before a new key has its top-level name
        (a test holds the writer there, to see what a slow kubelet would show)."""
        for key in data:
            validate_key(key)
        old = self.current()
        old_keys = set(os.listdir(old)) if old is not None else set()
        removed = old_keys - set(data)
        if old is not None and not removed and all(_same(old / k, v) for k, v in data.items()):
            return False
        version = self._new_version_dir()
        for key, content in data.items():
            path = version / key
            path.write_bytes(content)
            path.chmod(FILE_MODE)  # whatever the umask, as the kubelet's chmod after the write
        tmp = self.target / DATA_TMP
        tmp.unlink(missing_ok=True)  # a link left by a write that failed half-way
        tmp.symlink_to(version.name)
        tmp.rename(self.target / DATA)  # rename(2): atomic, over the old link
        if after_swap is not None:
            after_swap()
        for key in data:
            link = self.target / key
            if not link.is_symlink():
                link.symlink_to(f"{DATA}/{key}")
        for key in removed:
            (self.target / key).unlink(missing_ok=True)
        if old is not None:
            _remove_tree(old)
        return True

    def _new_version_dir(self) -> Path:
        """``..2006_01_02_15_04_05.<digits>``: Go's ``os.MkdirTemp`` with the kubelet's UTC
        timestamp prefix (the digits are random, not a fraction of a second)."""
        stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
        while True:
            path = self.target / (stamp + str(secrets.randbelow(10**10)))
            try:
                path.mkdir()
            except FileExistsError:
                continue
            path.chmod(DIR_MODE)
            return path


def _same(path: Path, content: bytes) -> bool:
    try:
        return path.read_bytes() == content
    except FileNotFoundError:
        return False


def _remove_tree(path: Path) -> None:
    """Removes a version directory: flat, files only (keys hold no ``/``)."""
    for child in path.iterdir():
        child.unlink()
    path.rmdir()
