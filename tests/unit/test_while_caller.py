"""hack/lib/while-caller.sh, the watchdog .ci/run puts around its background build of the oldest
supported Kubernetes: a caller SIGKILLed (a runner's timeout) cannot stop the build itself, so the
build must stop once its caller is gone — the whole of it, not only its first process — and a
TERM from a caller that is still there stops it as before."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from tests.support.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "hack" / "lib" / "while-caller.sh"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return "Z"


def job(tmp_path: Path) -> list[str]:
    """A command like a build: a shell that starts a child (a compiler) and waits for it; both
    write their pids, so the test can see that neither outlives the stop."""
    pids = tmp_path / "pids"
    return [
        "bash",
        "-c",
        f"echo $$ >> {pids}; sleep 300 & echo $! >> {pids}; wait",
    ]


def read_pids(tmp_path: Path) -> list[int]:
    path = tmp_path / "pids"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def test_the_job_and_what_it_started_stop_when_the_caller_is_killed(tmp_path: Path) -> None:
    """The caller is SIGKILLed and left unreaped (a zombie, as under a parent that does not
    reap): gone all the same."""
    log = tmp_path / "log"
    with log.open("wb") as out:
        caller = subprocess.Popen(  # like .ci/run: the watchdog is its background job
            ["bash", "-c", f'{SCRIPT} $$ "$@" & wait', "caller", *job(tmp_path)],
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        wait_for(lambda: len(read_pids(tmp_path)) == 2, timeout=10, what="the job's two pids")
        pids = read_pids(tmp_path)
        assert all(alive(p) for p in pids)
        os.kill(caller.pid, signal.SIGKILL)  # not reaped until the end: a zombie meanwhile
        wait_for(lambda: _state(caller.pid) == "Z", timeout=10, what="the caller a zombie")
        wait_for(lambda: not any(alive(p) for p in pids), timeout=15, what="the job to be stopped")
    finally:
        caller.kill()
        caller.wait()
        with_group_killed(caller.pid)
        for p in read_pids(tmp_path):
            with_pid_killed(p)
    assert f"its caller (pid {caller.pid}) is gone" in log.read_text()


def test_a_term_stops_the_job_whole_and_the_exit_code_says_so(tmp_path: Path) -> None:
    watchdog = subprocess.Popen(
        [str(SCRIPT), str(os.getpid()), *job(tmp_path)],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: len(read_pids(tmp_path)) == 2, timeout=10, what="the job's two pids")
        pids = read_pids(tmp_path)
        watchdog.send_signal(signal.SIGTERM)
        _, err = watchdog.communicate(timeout=15)
        assert watchdog.returncode == 143
        assert "signalled; stopping" in err
        wait_for(lambda: not any(alive(p) for p in pids), timeout=10, what="the job to stop")
    finally:
        with_group_killed(watchdog.pid)
        for p in read_pids(tmp_path):
            with_pid_killed(p)


def test_while_the_caller_lives_the_job_runs_to_its_end_and_its_exit_code_is_kept() -> None:
    done = subprocess.run(
        [str(SCRIPT), str(os.getpid()), "bash", "-c", "sleep 1.5; exit 7"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 7
    assert "stopping" not in done.stderr


def test_a_missing_pid_is_a_usage_error_and_a_dead_one_is_refused() -> None:
    done = subprocess.run(
        [str(SCRIPT), "true"], capture_output=True, text=True, timeout=10, check=False
    )
    assert done.returncode == 2
    assert "usage:" in done.stderr
    gone = subprocess.Popen(["true"])
    gone.wait()
    done = subprocess.run(
        [str(SCRIPT), str(gone.pid), "true"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert done.returncode == 2
    assert f"no process {gone.pid}" in done.stderr


def with_group_killed(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def with_pid_killed(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
