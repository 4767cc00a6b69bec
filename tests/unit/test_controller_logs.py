"""How a test reads a controller process's logs (tests/support/controller.py): each start logs to
a file of its own, and ``logs()`` joins them in the order the runs were started."""

from __future__ import annotations

from pathlib import Path

from tests.support.controller import ControllerProcess


def test_logs_are_joined_by_run_number_and_run_log_is_the_last_run(tmp_path: Path) -> None:
    """Break: a name sort, which puts run 10 before run 2 (the tail a failure prints, and the
    first time ``logged_at`` finds, would then be an older run's)."""
    for run in (1, 2, 10):
        (tmp_path / f"controller-{run}.log").write_text(f"run {run}")
    process = ControllerProcess(None, tmp_path)
    process.runs = 10  # as after ten starts
    assert process.logs().splitlines() == ["run 1", "run 2", "run 10"]
    assert process.run_log() == "run 10"
