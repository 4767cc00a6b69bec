#!/usr/bin/env python3
"""Rewrites a `docker save` archive the way `kind build node-image` reads image archives.

kind decides which images it must still pull from the tags in an archive. It reads the first of
`repositories` and `manifest.json` it meets in the tar, and of manifest.json only the first entry,
and it compares the tags as written: `docker save` writes Docker Hub images in their short form
(`kindest/kindnetd:v1`), which does not match the `docker.io/kindest/kindnetd:v1` that kind asks
for. So the output has a `repositories` file first, naming every image fully qualified, then a
manifest.json with the same fully qualified tags, then the archive's other members unchanged.

usage: archive.py IN.tar OUT.tar
"""

import io
import json
import sys
import tarfile


def qualified(tag: str) -> str:
    """The fully qualified form of a Docker reference (docker.io/library/... for short names)."""
    name, _, version = tag.rpartition(":")
    first = name.split("/", 1)[0]
    if "/" in name and ("." in first or ":" in first or first == "localhost"):
        return tag
    if "/" not in name:
        name = "library/" + name
    return f"docker.io/{name}:{version}"


def add_bytes(out: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    out.addfile(info, io.BytesIO(data))


def main(src: str, dst: str) -> None:
    with tarfile.open(src) as archive:
        manifest_file = archive.extractfile("manifest.json")
        assert manifest_file is not None
        manifest = json.load(manifest_file)
        repositories: dict[str, dict[str, str]] = {}
        for entry in manifest:
            entry["RepoTags"] = [qualified(t) for t in entry.get("RepoTags") or []]
            top = entry["Layers"][-1].split("/")[0] if entry["Layers"] else ""
            for tag in entry["RepoTags"]:
                repo, _, version = tag.rpartition(":")
                repositories.setdefault(repo, {})[version] = top
        with tarfile.open(dst, "w", format=tarfile.PAX_FORMAT) as out:
            add_bytes(out, "repositories", json.dumps(repositories).encode())
            add_bytes(out, "manifest.json", json.dumps(manifest).encode())
            for member in archive:
                if member.name in ("repositories", "manifest.json"):
                    continue
                out.addfile(member, archive.extractfile(member) if member.isfile() else None)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
