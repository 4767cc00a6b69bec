"""The test-side AtomicWriter lays a Secret out as the kubelet does: a timestamped version
directory, ``..data`` swapped by one rename, ``<key> -> ..data/<key>`` links, removed keys and
the previous version cleaned up, an equal payload left alone, the kubelet's bad keys refused.
The Envoy reload test trusts this layout to be what a Pod sees, so it is pinned here."""

from __future__ import annotations

import os
import re
import stat
import threading
from pathlib import Path

import pytest

from tests.support.atomicwriter import AtomicWriter

VERSION = re.compile(r"^\.\.\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\.\d+$")


def versions(target: Path) -> list[str]:
    return sorted(n for n in os.listdir(target) if VERSION.match(n))


def test_a_version_is_a_timestamped_directory_behind_data_and_keys_link_through_it(
    tmp_path: Path,
) -> None:
    writer = AtomicWriter(tmp_path / "secret")
    assert writer.write({"config.yaml": b"v1 config", "cred-a.yaml": b"v1 cred"})
    target = tmp_path / "secret"
    [version] = versions(target)
    assert set(os.listdir(target)) == {"..data", version, "config.yaml", "cred-a.yaml"}
    assert os.readlink(target / "..data") == version  # relative, as the kubelet's
    assert stat.S_IMODE((target / version).stat().st_mode) == 0o755
    for key, content in (("config.yaml", b"v1 config"), ("cred-a.yaml", b"v1 cred")):
        assert os.readlink(target / key) == f"..data/{key}"
        assert (target / key).read_bytes() == content
        assert stat.S_IMODE((target / version / key).lstat().st_mode) == 0o644
        assert stat.S_ISREG((target / version / key).lstat().st_mode)


def test_a_new_version_swaps_data_removes_the_old_one_and_the_links_of_removed_keys(
    tmp_path: Path,
) -> None:
    writer = AtomicWriter(tmp_path)
    writer.write({"a": b"1", "b": b"1"})
    [first] = versions(tmp_path)
    links_before = os.lstat(tmp_path / "a").st_ino
    assert writer.write({"a": b"2"})
    [second] = versions(tmp_path)
    assert second != first
    assert set(os.listdir(tmp_path)) == {"..data", second, "a"}
    assert (tmp_path / "a").read_bytes() == b"2"
    assert os.lstat(tmp_path / "a").st_ino == links_before  # the key's link was not remade
    assert not (tmp_path / "b").is_symlink()
    # a key coming back gets its link again
    assert writer.write({"a": b"2", "b": b"3"})
    assert (tmp_path / "b").read_bytes() == b"3"
    assert len(versions(tmp_path)) == 1


def test_an_equal_payload_writes_nothing(tmp_path: Path) -> None:
    writer = AtomicWriter(tmp_path)
    assert writer.write({"a": b"1", "b": b"2"})
    before = os.readlink(tmp_path / "..data")
    assert not writer.write({"a": b"1", "b": b"2"})
    assert os.readlink(tmp_path / "..data") == before
    assert versions(tmp_path) == [before]
    assert writer.write({"a": b"1", "b": b"changed"})
    assert os.readlink(tmp_path / "..data") != before


@pytest.mark.parametrize("key", ["", "a/b", "/a", "..", "..data", "..x", ".", "k" * 256])
def test_keys_the_kubelet_refuses_are_refused_before_anything_is_written(
    tmp_path: Path, key: str
) -> None:
    writer = AtomicWriter(tmp_path)
    with pytest.raises(ValueError, match="invalid key"):
        writer.write({"good": b"x", key: b"y"})
    assert os.listdir(tmp_path) == []


def test_a_reader_sees_the_old_or_the_new_content_never_a_missing_or_partial_file(
    tmp_path: Path,
) -> None:
    """Many swaps while a reader opens ``<dir>/<key>`` in a loop: every read is one whole
    version's content (each version's content is distinct and long enough that a torn read
    would show)."""
    writer = AtomicWriter(tmp_path)
    contents = [(f"version {i} " * 200).encode() for i in range(200)]
    writer.write({"key": contents[0]})
    done = threading.Event()
    seen: list[bytes] = []
    failures: list[BaseException] = []

    def read() -> None:
        try:
            while not done.is_set():
                seen.append((tmp_path / "key").read_bytes())
        except BaseException as exc:  # any failure is the finding
            failures.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for content in contents[1:]:
            assert writer.write({"key": content, "other": content[:10]})
            if failures:
                break
    finally:
        done.set()
        reader.join(timeout=30)
    assert not reader.is_alive()
    assert failures == []
    assert len(seen) > 1
    valid = set(contents)
    assert all(s in valid for s in seen)
    assert (tmp_path / "key").read_bytes() == contents[-1]
