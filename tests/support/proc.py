"""Processes under test (the controller, a toy manager) and their HTTP endpoints."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlencode

from prometheus_client import parser

REPO = Path(__file__).resolve().parents[2]


class Proc:
    """A Python process with its output in a log file; killed at the end of the test."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        *,
        metrics_port: int = 0,
        probe_port: int = 0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.log_path = log_path
        self.metrics_port = metrics_port
        self.probe_port = probe_port
        full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        self._log = log_path.open("ab")
        self.popen = subprocess.Popen(
            [sys.executable, *argv],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=REPO,
        )

    def http(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metrics(self, *names: str) -> str:
        """The process's /metrics, only the series of ``names`` (prometheus_client's ``name[]``
        query; every series when none is named). A test reads one metric at a time, and a full
        scrape renders every series in the process under test: at 10,000 chains, scraped once a
        second while a benchmark waits, that was 6.5 % of the no-op restart's CPU, which a
        Prometheus scraping every 30 s would not cost it."""
        query = urlencode([("name[]", name) for name in names])
        return self.http(self.metrics_port, "/metrics" + (f"?{query}" if query else ""))[1]

    def metric(self, metric_name: str, **labels: str) -> float | None:
        """One sample from the process's /metrics, None if absent."""
        text = self.metrics(metric_name)
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            series, _, value = line.rpartition(" ")
            metric, _, label_text = series.partition("{")
            got = ",".join(sorted(label_text.rstrip("}").split(","))) if label_text else ""
            if metric == metric_name and got == wanted:
                return float(value)
        return None

    def samples(self, metric_name: str) -> list[tuple[dict[str, str], float]]:
        """Every sample named ``metric_name`` in /metrics (``…_total`` for a counter), with its
        labels."""
        text = self.metrics(metric_name)
        return [
            (dict(sample.labels), sample.value)
            for family in parser.text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == metric_name
        ]

    def series(self, metric_name: str) -> list[dict[str, str]]:
        """The label sets of :meth:`samples`."""
        return [labels for labels, _ in self.samples(metric_name)]

    def total(self, metric_name: str, **labels: str) -> float:
        """The sum of the samples of ``metric_name`` whose labels include ``labels`` (whatever
        their other labels: a sharded replica's ``shard``, say)."""
        return sum(
            value
            for got, value in self.samples(metric_name)
            if all(got.get(k) == v for k, v in labels.items())
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 30) -> int:
        self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(timeout)

    def kill(self) -> None:
        self.popen.kill()
        self.popen.wait()

    def close(self) -> None:
        if self.popen.poll() is None:
            self.kill()
        self._log.close()
