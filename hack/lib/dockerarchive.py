#!/usr/bin/env python3
"""Rewrites a docker archive (``buildah push IMG docker-archive:…``) with its ``repositories``
file first, then ``manifest.json``, then the layers and config unchanged, and checks that
``manifest.json`` names the tag: kind (``kind load image-archive``, node-image builds) reads the
first of those two files it meets, and a ``repositories`` file first is what it reads best.

usage: dockerarchive.py IN.tar OUT.tar TAG
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from typing import Any


def tags_of(manifest: list[dict[str, Any]]) -> set[str]:
    return {str(t) for entry in manifest for t in (entry.get("RepoTags") or [])}


def repositories(
    manifest: list[dict[str, Any]], legacy: dict[str, str]
) -> dict[str, dict[str, str]]:
    """``repositories`` as ``docker save`` writes it: repository → tag → the id of the image's
    top layer (the folder of its ``<id>/layer.tar``; ``legacy`` maps a layer file to it)."""
    found: dict[str, dict[str, str]] = {}
    for entry in manifest:
        layers = entry.get("Layers") or []
        top = str(layers[-1]) if layers else ""
        top_id = legacy.get(top) or top.split("/")[0].removesuffix(".tar")
        for tag in entry.get("RepoTags") or []:
            repo, _, version = str(tag).rpartition(":")
            found.setdefault(repo, {})[version] = top_id
    return found


def legacy_ids(archive: tarfile.TarFile) -> dict[str, str]:
    """Layer file → the legacy folder whose ``layer.tar`` is (or links to) it."""
    found: dict[str, str] = {}
    for item in archive.getmembers():
        folder, _, leaf = item.name.rpartition("/")
        if leaf == "layer.tar" and folder:
            target = item.linkname.removeprefix("../") if item.issym() else item.name
            found[target] = folder
    return found


def rewrite(src: str, dst: str, tag: str) -> None:
    with tarfile.open(src) as archive:
        member = archive.extractfile("manifest.json")
        if member is None:
            raise SystemExit(f"dockerarchive: {src} has no manifest.json")
        raw_manifest = member.read()
        manifest = json.loads(raw_manifest)
        if tag not in tags_of(manifest):
            named = sorted(tags_of(manifest))
            raise SystemExit(f"dockerarchive: manifest.json names {named}, not {tag}")
        with tarfile.open(dst, "w", format=tarfile.PAX_FORMAT) as out:
            for name, data in (
                ("repositories", json.dumps(repositories(manifest, legacy_ids(archive))).encode()),
                ("manifest.json", raw_manifest),
            ):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = 0o644
                out.addfile(info, io.BytesIO(data))
            for item in archive.getmembers():
                if item.name in ("repositories", "manifest.json"):
                    continue
                out.addfile(item, archive.extractfile(item) if item.isfile() else None)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    rewrite(*sys.argv[1:])
