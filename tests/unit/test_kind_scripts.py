"""The kind scripts' promises that need no Docker: make e2e-kind on a machine without Docker
fails with its reason and leaves nothing behind (its cleanup is in place before it creates
anything), .ci/run gets a one-line reason to print, and the node image's archives are written the
way `kind build node-image` reads them (a `repositories` file first, fully qualified tags)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.polling import wait_for

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


def answering_docker_path(tmp_path: Path, git: str | None = None, nice: str | None = None) -> str:
    """The no-Docker PATH, but with a docker client whose engine answers (and does nothing else),
    a `git` that records the niceness it runs at and fails (the images' first step), and a `nice`
    that records its arguments: what hack/e2e-kind.sh does before its cluster, seen from outside.
    The docker client records its arguments too (``docker-args``, a line a call)."""
    bin_dir = Path(no_docker_path(tmp_path))
    for tool in ("pgrep", "renice", "touch"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    scripts = {
        "docker": f'printf "%s\\n" "$*" >> {tmp_path / "docker-args"}\n'
        '[ "$1" = version ] && { echo 20.10.0; exit 0; }\nexit 1',
        "git": git or f"awk '{{print $19}}' /proc/self/stat >> {tmp_path / 'git-niceness'}\nexit 1",
        "nice": f'printf "%s\\n" "$*" >> {tmp_path / "nice-args"}\n{nice or ""}\n'
        f'exec {shutil.which("nice")} "$@"',
    }
    for name, body in scripts.items():
        script = bin_dir / name
        script.unlink(missing_ok=True)
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    return str(bin_dir)


def start_gated_run(
    tmp_path: Path,
    gate: Path,
    git: str | None = None,
    extra_env: dict[str, str] | None = None,
    nice: str | None = None,
) -> tuple[subprocess.Popen[bytes], Path]:
    """hack/e2e-kind.sh waiting for ``gate``, on :func:`answering_docker_path` (``git``: the body
    of its git, the images' first step; ``nice``: lines its nice runs before the command, which
    is the node image's build), in a session of its own (:func:`kill_session`)."""
    (tmp_path / "tmp").mkdir()
    env = {
        "PATH": answering_docker_path(tmp_path, git, nice),
        "HOME": str(tmp_path / "home"),
        "TMPDIR": str(tmp_path / "tmp"),
        "KIND_STATE": str(tmp_path / "state"),
        "KIND_NODE_IMAGE": "kindest/node:v0.0.0",  # printed as it is: nothing is built
        "E2E_KIND_CLUSTER_AFTER": str(gate),
        **(extra_env or {}),
    }
    log = tmp_path / "e2e-kind.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["bash", "hack/e2e-kind.sh"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    return process, log


def while_running(
    process: subprocess.Popen[bytes], log: Path, condition: Callable[[], bool], what: str
) -> None:
    """Waits (tests.support.polling) until ``condition`` holds; fails at once, with the log, when
    the run ends first."""
    wait_for(lambda: condition() or process.poll() is not None, what=what)
    assert condition(), f"the run ended before {what}:\n{log.read_text()}"


def test_with_a_gate_the_builds_run_at_nice_19_and_the_cluster_waits_for_the_file(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "make-test-passed"
    process, log = start_gated_run(tmp_path, gate)
    try:
        while_running(process, log, lambda: "waiting for" in log.read_text(), "the gate")
        niceness = tmp_path / "git-niceness"
        # the images' first step ran (it fails: no worktree)
        while_running(process, log, niceness.exists, "the images' first step")
        time.sleep(0.5)  # an observation window, not a synchronisation: it must still wait
        assert process.poll() is None
        assert "-- cluster" not in log.read_text()
        gate.touch()
        assert process.wait(timeout=30) != 0  # no kind here: the cluster stage fails
    finally:
        kill_session(process)
    out = log.read_text()
    assert "e2e-kind: after done in" in out
    assert out.index("e2e-kind: after done in") < out.index("-- cluster")
    assert (tmp_path / "nice-args").read_text().split()[:2] == ["-n", "19"]
    assert niceness.read_text().split()[0] == "19"
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_term_while_waiting_for_the_gate_ends_the_run_at_once_with_its_cleanup(
    tmp_path: Path,
) -> None:
    process, log = start_gated_run(tmp_path, tmp_path / "never-written")
    try:
        while_running(process, log, lambda: "waiting for" in log.read_text(), "the gate")
        started = time.monotonic()
        process.terminate()
        assert process.wait(timeout=10) == 143
        assert time.monotonic() - started < 5
    finally:
        kill_session(process)
    out = log.read_text()
    # the gate stage itself is the one cut short (break: a "(failed)" of any other stage, or
    # anywhere in the log, passed the former check)
    assert failed_stage(out, "after"), out
    assert "-- cluster" not in out
    assert list((tmp_path / "tmp").iterdir()) == []


def timings(out: str) -> str:
    """The run's ``e2e-kind: timings:`` line (it has one whatever ended it)."""
    return next(line for line in out.splitlines() if line.startswith("e2e-kind: timings:"))


def failed_stage(out: str, stage: str) -> bool:
    """Whether the timings line says ``stage`` was cut short (``<stage> N s (failed)``)."""
    return re.search(rf"(?<!\S){re.escape(stage)} \d+ s \(failed\)", timings(out)) is not None


def test_a_run_whose_caller_is_killed_before_the_gate_ends_with_its_cleanup(
    tmp_path: Path,
) -> None:
    """.ci/run SIGKILLed while make test runs never writes the file: the run must not wait for
    it for ever (holding a dockerd it started)."""
    (tmp_path / "tmp").mkdir()
    env = {
        "PATH": answering_docker_path(tmp_path),
        "HOME": str(tmp_path / "home"),
        "TMPDIR": str(tmp_path / "tmp"),
        "KIND_STATE": str(tmp_path / "state"),
        "KIND_NODE_IMAGE": "kindest/node:v0.0.0",
        "E2E_KIND_CLUSTER_AFTER": str(tmp_path / "never-written"),
    }
    log = tmp_path / "e2e-kind.log"
    with log.open("wb") as out:
        caller = subprocess.Popen(  # a caller like .ci/run: the run is its background job
            ["bash", "-c", "bash hack/e2e-kind.sh & wait"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=out,
        )
    try:
        while_running(caller, log, lambda: "waiting for" in log.read_text(), "the gate")
        caller.kill()
        caller.wait()
        wait_for(lambda: "e2e-kind: timings:" in log.read_text(), timeout=15, what="the cleanup")
    finally:
        caller.kill()
        caller.wait()
    out_text = log.read_text()
    assert "which was to write" in out_text
    assert "after " in out_text.split("e2e-kind: timings:")[1]
    assert "-- cluster" not in out_text
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_term_stops_every_process_of_the_image_builds_even_one_out_of_their_tree(
    tmp_path: Path,
) -> None:
    """A build step may leave the tree cleanup can read (its parent exits first: it is
    reparented) and may ignore TERM: the images run in a process group of their own, and
    everything in it is gone when the run has ended (KILLed E2E_KIND_STOP_SECONDS after TERM)."""
    orphan_pid = tmp_path / "orphan-pid"
    orphan = tmp_path / "orphan"  # ignores TERM, tells its pid, then waits
    orphan.write_text(f"#!/bin/sh\ntrap '' TERM\necho $$ > {orphan_pid}\nexec sleep 300\n")
    orphan.chmod(0o755)
    # the images' first step: starts the orphan from a shell that exits at once, then waits
    git = f"/bin/sh -c '{orphan} &'\nexec sleep 300"
    stop = {"E2E_KIND_STOP_SECONDS": "2"}
    process, log = start_gated_run(tmp_path, tmp_path / "never-written", git, stop)
    try:
        while_running(process, log, orphan_pid.exists, "the orphaned build step")
        wait_for(lambda: orphan_pid.read_text().strip() != "", what="its pid")
        pid = int(orphan_pid.read_text())
        assert alive(pid)
        while_running(process, log, lambda: "waiting for" in log.read_text(), "the gate")
        process.terminate()
        assert process.wait(timeout=30) == 143
        out = log.read_text()
        assert not alive(pid), f"the orphaned build step {pid} survived the run:\n{out}"
        assert "the image builds still ran 2 s after TERM: KILL" in out
        assert list((tmp_path / "tmp").iterdir()) == []
    finally:
        kill_session(process)  # nothing is left behind, even when the test fails


def test_a_term_while_the_node_image_builds_runs_the_whole_cleanup_when_docker_cannot_list(
    tmp_path: Path,
) -> None:
    """Cleanup removes the containers an interrupted node-image build left, asking Docker for
    them; an engine that does not answer then (here `docker ps` fails) must not end cleanup
    before it has stopped the rest and removed the work folder (it once did, exiting 1)."""
    started = tmp_path / "node-image-started"
    block = f'case "$*" in *node-image.sh*) touch {started}; exec sleep 300;; esac'
    process, log = start_gated_run(tmp_path, tmp_path / "never-written", nice=block)
    try:
        while_running(process, log, started.exists, "the node image's build")
        process.terminate()
        assert process.wait(timeout=30) == 143, log.read_text()
        out = log.read_text()
        assert failed_stage(out, "node-image"), out
        # cleanup asked Docker for the build's containers (break: no remove_build_containers,
        # which passed the former checks: they hold with or without the question)
        asked = (tmp_path / "docker-args").read_text().splitlines()
        assert any(line.startswith("ps -a") for line in asked), asked
        assert list((tmp_path / "tmp").iterdir()) == []
    finally:
        kill_session(process)


def kill_session(process: subprocess.Popen[bytes]) -> None:
    """KILLs every process of the session ``process`` leads (:func:`start_gated_run`), reparented
    ones included, and reaps ``process``."""
    for proc in Path("/proc").glob("[0-9]*"):
        fields = stat_fields(int(proc.name))
        if fields and int(fields[3]) == process.pid:  # the session id: after state, ppid, pgrp
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)
    process.kill()
    process.wait()


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name (which may hold spaces and parentheses), from
    the state on; None once the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
