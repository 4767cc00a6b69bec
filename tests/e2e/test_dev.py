"""`rotator dev` as a user runs it: everything comes up, every sample becomes Ready, a rotation
shows in the live table, the printed curl goes through the LiteLLM gateway (whose last success
the table shows), and Ctrl-C leaves no process and no temporary folder behind. On a Kubernetes
that has the ``ShardedListAndWatch`` gate (alpha in v1.36; not ``make test-oldest``'s v1.33, whose
kube-apiserver refuses an unknown gate and would not start), it runs with the gate passed by
``--apiserver-flag``, and its API server filters a sharded list."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from controllers.reconcilers import api as rapi
from controllers.reconcilers import conditions
from controllers.runtime import client as clients
from controllers.runtime import objects, restconfig, sharding
from rotator_devkit.devenv import manifests
from tests.support import kubeversion
from tests.support.polling import wait_for
from tests.support.proc import Proc

pytestmark = pytest.mark.local_control_plane

STS_POLICY = "default/bedrock-web-identity"
GATED = int(kubeversion.pinned().split(".")[1]) >= 36
"""Whether the API server under test has the ``ShardedListAndWatch`` gate (v1.36 on)."""
SAMPLES = manifests.load(manifests.CONFIG / "samples")
SAMPLE_POLICIES = {d["metadata"]["name"] for d in SAMPLES if d["kind"] == "BackendSecurityPolicy"}


def last_table(text: str) -> dict[str, list[str]]:
    """Policy → its row's cells, from the last table printed (its policy block)."""
    block = text.rsplit("── policies at ", 1)[-1].splitlines()[1:]
    rows = {}
    for line in block[1:]:
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = cells
    return rows


def rotations(text: str, policy: str) -> set[str]:
    """Every LAST ROTATION value the tables showed for ``policy``."""
    seen = set()
    for line in text.splitlines():
        if line.startswith(policy + " "):
            seen.add(re.split(r"\s{2,}", line.strip())[-1].split(" ")[0])
    return seen - {"-"}


def children_of(folder: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if folder in (proc / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


@pytest.mark.oldest_kubernetes
def test_rotator_dev_runs_every_sample_rotates_and_stops_clean(tmp_path: Path) -> None:
    out = tmp_path / "dev.out"
    proc = Proc(
        [
            "-m",
            "controllers.cli",
            "dev",
            "--lifetime",
            "60",
            "--metrics-bind-address",
            "127.0.0.1:0",
            "--health-probe-bind-address",
            "127.0.0.1:0",
            "--gateway-port",
            "0",
            "--admin-port",
            "0",
            *(["--apiserver-flag=--feature-gates=ShardedListAndWatch=true"] if GATED else []),
        ],
        tmp_path / "dev.log",
        env={"KUBEBUILDER_ASSETS": os.environ["KUBEBUILDER_ASSETS"]},
    )
    try:
        log = proc.log_path
        folder = wait_for(
            lambda: (
                (m := re.search(r"kubeconfig: (\S+)/admin.kubeconfig", log.read_text()))
                and m.group(1)
            ),
            timeout=120,
            what="kubeconfig printed",
        )
        # the next line, printed by a second write: it may not be in the file yet
        wait_for(
            lambda: "get rotator -A" in log.read_text(), timeout=10, what="the kubectl hint printed"
        )

        def all_ready() -> bool:
            table = last_table(log.read_text())
            return {p.removeprefix("default/") for p in table} == SAMPLE_POLICIES and all(
                row[2] == "True CredentialsReady" for row in table.values()
            )

        wait_for(all_ready, timeout=120, interval=0.5, what="every sample Ready")
        api = clients.Client(restconfig.load(f"{folder}/admin.kubeconfig"))

        def every_route_programmed_with_all_backends() -> bool:
            routes = api.list(rapi.ROUTES, namespace="default")["items"]
            return len(routes) == sum(d["kind"] == "Route" for d in SAMPLES) and all(
                (c := conditions.of(r, "ResolvedRefs")) is not None and c["status"] == "True"
                for r in routes
            )

        wait_for(every_route_programmed_with_all_backends, timeout=30, what="every sample chain")
        if GATED:  # the gate --apiserver-flag passed: the server says it filtered a sharded list
            selector = sharding.ranges(2)[0].selector()
            listed = api.list(objects.SECRETS, shard_selector=selector)
            assert (listed["metadata"].get("shardInfo") or {}).get("selector") == selector
        wait_for(
            lambda: len(rotations(log.read_text(), STS_POLICY)) >= 2,
            timeout=90,
            interval=0.5,
            what="a rotation in the table",
        )
        # the sample Route marked for a gateway: a LiteLLM proxy on loopback, and a curl through it
        curl = wait_for(
            lambda: (m := re.search(r"^  (curl .+)$", log.read_text(), re.M)) and m.group(1),
            timeout=120,
            interval=0.5,
            what="the gateway's curl line",
        )
        answer = subprocess.run(
            ["bash", "-c", curl], capture_output=True, text=True, timeout=60, check=False
        )
        assert answer.returncode == 0, answer.stderr
        assert '"chat.completion"' in answer.stdout, answer.stdout[:500]
        wait_for(
            lambda: re.search(
                r"^http://127\.0\.0\.1:\d+\s+gpt-4o-mini\s+openai\s+.*\d\d:\d\d:\d\d \([^)]*\)$",
                log.read_text(),
                re.M,
            ),
            timeout=120,
            interval=0.5,
            what="the gateway's last successful request in the table",
        )
        assert children_of(folder), "the control plane runs under the dev folder"
        proc.popen.send_signal(signal.SIGINT)
        assert proc.popen.wait(60) == 0
        out.write_text(log.read_text())
        assert children_of(folder) == [], "no process left"
        assert not Path(folder).exists(), "no temporary folder left"
    finally:
        proc.close()


def test_ctrl_c_while_starting_stops_everything(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = Proc(
        ["-m", "controllers.cli", "dev"],
        tmp_path / "dev.log",
        env={"KUBEBUILDER_ASSETS": os.environ["KUBEBUILDER_ASSETS"], "TMPDIR": str(temp)},
    )
    try:
        wait_for(lambda: any(temp.iterdir()), timeout=60, interval=0.05, what="startup")
        proc.popen.send_signal(signal.SIGINT)
        assert proc.popen.wait(60) == 130
        assert "interrupted while starting" in proc.log_path.read_text()
        assert "Traceback" not in proc.log_path.read_text()
        assert children_of(str(temp)) == [], "no process left"
        assert list(temp.iterdir()) == [], "no temporary folder left"
    finally:
        proc.close()


def test_rotator_dev_outside_a_checkout_says_what_it_needs(tmp_path: Path) -> None:
    proc = Proc(
        ["-m", "controllers.cli", "dev", "--config", str(tmp_path)],
        tmp_path / "dev.log",
        env={"KUBEBUILDER_ASSETS": os.environ["KUBEBUILDER_ASSETS"]},
    )
    try:
        assert proc.popen.wait(30) == 2
        assert "run rotator dev from a checkout" in proc.log_path.read_text()
    finally:
        proc.close()
