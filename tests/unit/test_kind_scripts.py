"""The kind scripts' promises that need no Docker: make e2e-kind on a machine without Docker
fails with its reason and leaves nothing behind (its cleanup is in place before it creates
anything), .ci/run gets a one-line reason to print, and the node image's archives are written the
way `kind build node-image` reads them (a `repositories` file first, fully qualified tags)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS = [
    "bash",
    "awk",
    "cat",
    "cut",
    "dirname",
    "env",
    "grep",
    "id",
    "mkdir",
    "mktemp",
    "readlink",
    "rm",
    "sed",
    "sha256sum",
    "sleep",
    "tail",
    "timeout",
]


def no_docker_path(tmp_path: Path) -> str:
    """A PATH with the shell tools the scripts use, a docker client whose engine never answers,
    and no dockerd: a machine where Docker cannot run, whatever this machine has."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    docker = bin_dir / "docker"
    docker.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    docker.chmod(0o755)
    return str(bin_dir)


def run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    work_tmp = tmp_path / "tmp"
    work_tmp.mkdir(exist_ok=True)
    env = {
        "PATH": no_docker_path(tmp_path),
        "HOME": str(tmp_path / "home"),
        "TMPDIR": str(work_tmp),
        "KIND_STATE": str(tmp_path / "state"),
    }
    return subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_e2e_kind_without_docker_fails_with_its_reason_and_leaves_no_temp_file(
    tmp_path: Path,
) -> None:
    result = run(["bash", "hack/e2e-kind.sh"], tmp_path)
    assert result.returncode != 0
    assert "dockerd is not installed" in result.stderr or "needs root" in result.stderr
    assert list((tmp_path / "tmp").iterdir()) == []  # the kubeconfig and work folder are gone


def test_docker_check_gives_ci_a_one_line_reason_where_docker_cannot_run(tmp_path: Path) -> None:
    result = run(["bash", "hack/kind/docker.sh", "check"], tmp_path)
    assert result.returncode == 1
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    assert "no Docker engine answers" in lines[0]


def docker_save_archive(path: Path, tags: list[str]) -> None:
    """A minimal `docker save` archive: one image, its layer, manifest.json last."""
    with tarfile.open(path, "w") as out:
        for name, data in (
            ("abc/layer.tar", b""),
            ("cfg.json", b"{}"),
            (
                "manifest.json",
                json.dumps(
                    [{"Config": "cfg.json", "RepoTags": tags, "Layers": ["abc/layer.tar"]}]
                ).encode(),
            ),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))


def test_node_image_archives_name_every_image_as_kind_asks_for_it_first(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.tar", tmp_path / "out.tar"
    docker_save_archive(src, ["kindest/kindnetd:v1", "registry.k8s.io/pause:3.10", "busybox:1"])
    subprocess.run(["python3", str(ROOT / "hack/kind/archive.py"), str(src), str(dst)], check=True)
    with tarfile.open(dst) as archive:
        names = archive.getnames()
        assert names[:2] == ["repositories", "manifest.json"]
        assert set(names) == {"repositories", "manifest.json", "abc/layer.tar", "cfg.json"}
        repositories_file = archive.extractfile("repositories")
        assert repositories_file is not None
        repositories = json.load(repositories_file)
    assert repositories == {
        "docker.io/kindest/kindnetd": {"v1": "abc"},
        "registry.k8s.io/pause": {"3.10": "abc"},
        "docker.io/library/busybox": {"1": "abc"},
    }
