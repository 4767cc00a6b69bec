"""hack/lib/dockerarchive.py, which hack/image.sh and hack/devkit-image.sh run on the docker
archive buildah writes: ``repositories`` first, then ``manifest.json``, then every other member
unchanged; ``repositories`` names the image's top layer by its legacy id; an archive whose
manifest does not name the tag is refused."""

from __future__ import annotations

import importlib.util
import io
import json
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "lib" / "dockerarchive.py"
TAG = "localhost/rotator-devkit:dev"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dockerarchive", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def buildah_like_archive(path: Path, tag: str) -> None:
    """Layers as ``<digest>.tar`` with legacy ``<id>/layer.tar`` symlinks, manifest.json last."""
    manifest = [{"Config": "cfg.json", "RepoTags": [tag], "Layers": ["aaa.tar", "bbb.tar"]}]
    with tarfile.open(path, "w") as out:
        for name, data in (("aaa.tar", b"base"), ("bbb.tar", b"top"), ("cfg.json", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
        for folder, target in (("id1", "aaa.tar"), ("id2", "bbb.tar")):
            link = tarfile.TarInfo(f"{folder}/layer.tar")
            link.type = tarfile.SYMTYPE
            link.linkname = f"../{target}"
            out.addfile(link)
        data = json.dumps(manifest).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        out.addfile(info, io.BytesIO(data))


def test_the_archive_starts_with_repositories_naming_the_top_layer_then_the_manifest(
    tmp_path: Path,
) -> None:
    buildah_like_archive(tmp_path / "in.tar", TAG)
    load().rewrite(str(tmp_path / "in.tar"), str(tmp_path / "out.tar"), TAG)
    with tarfile.open(tmp_path / "out.tar") as archive:
        names = archive.getnames()
        assert names[:2] == ["repositories", "manifest.json"]
        assert sorted(names[2:]) == [
            "aaa.tar",
            "bbb.tar",
            "cfg.json",
            "id1/layer.tar",
            "id2/layer.tar",
        ]
        repositories = json.load(archive.extractfile("repositories"))  # type: ignore[arg-type]
        manifest = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
        top = archive.extractfile("bbb.tar")
        assert top is not None
        assert top.read() == b"top"
    assert repositories == {"localhost/rotator-devkit": {"dev": "id2"}}
    assert manifest[0]["RepoTags"] == [TAG]


def test_an_archive_that_does_not_name_the_tag_is_refused(tmp_path: Path) -> None:
    buildah_like_archive(tmp_path / "in.tar", "localhost/other:1")
    with pytest.raises(SystemExit, match="not localhost/rotator-devkit:dev"):
        load().rewrite(str(tmp_path / "in.tar"), str(tmp_path / "out.tar"), TAG)
