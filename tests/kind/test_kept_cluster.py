"""The envtest suite pointed at a kept cluster (``ROTATOR_E2E_KUBECONFIG``, as the README
promises) leaves the cluster's own rotator Deployment as it found it: with config/default
installed and both replicas serving, ``tests/e2e/test_deploy.py`` runs as its own pytest against
this cluster — its own controller on the host takes the Lease while the Deployment is paused —
and afterwards the Deployment's spec and field owners are what they were, and both replicas are
Ready again. The bug this guards: that suite re-applied config/default under another field
manager (``image: rotator:latest``, ``replicas: 0``): ImagePullBackOff, then apply conflicts on
``.spec.replicas`` and the image for the cluster's owner."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.kind import install
from tests.kind.cluster import DEPLOYMENTS, Cluster
from tests.kind.conftest import Shipped
from tests.kind.env import KindEnv

ROOT = Path(__file__).resolve().parents[2]


CLUSTER_BOOKKEEPING = "kube-controller-manager"
"""The Deployment controller's own entry in managedFields (status and the revision annotation):
it is rewritten whenever the Deployment rolls or scales, by the cluster, not by an owner."""


def observed(cluster: Cluster) -> dict[str, Any]:
    """The Deployment's spec and the field owners an owner's next apply can conflict with."""
    found = cluster.get(DEPLOYMENTS, install.DEPLOYMENT, install.NAMESPACE)
    assert found is not None, "the shipped Deployment is installed"
    owners = [
        entry
        for entry in found["metadata"].get("managedFields") or []
        if entry.get("manager") != CLUSTER_BOOKKEEPING
    ]
    assert owners, "the owner's apply is recorded"
    return {"spec": found["spec"], "managedFields": owners}


def control_plane_assets() -> str:
    """kubectl for the suite's renders: the folder hack/testenv.sh builds or finds."""
    out = subprocess.run(
        [str(ROOT / "hack" / "testenv.sh")], capture_output=True, text=True, check=True
    )
    return out.stdout.strip().splitlines()[-1]


def test_the_envtest_suite_on_a_kept_cluster_leaves_its_deployment_as_it_found_it(
    kind_env: KindEnv, cluster: Cluster, shipped: Shipped, figure: Any, tmp_path: Path
) -> None:
    before = observed(cluster)
    assert before["spec"]["replicas"] == 2
    started = time.monotonic()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/e2e/test_deploy.py",
        ],
        cwd=ROOT,
        env={
            **os.environ,
            "ROTATOR_E2E_KUBECONFIG": str(kind_env.kubeconfig),
            "KUBEBUILDER_ASSETS": control_plane_assets(),
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    seconds = time.monotonic() - started
    (tmp_path / "test_deploy.out").write_text(run.stdout + run.stderr)
    tail = "\n".join(run.stdout.splitlines()[-15:])
    assert run.returncode == 0, f"tests/e2e/test_deploy.py on the kept cluster failed:\n{tail}"
    summary = tail.splitlines()[-1]
    assert " passed" in summary, tail
    assert "skipped" not in summary, "every test of test_deploy.py runs on a kept cluster"
    pods = install.Installation(cluster).wait_rolled_out()
    after = observed(cluster)
    assert after["spec"] == before["spec"], "the Deployment's spec changed"
    assert after["managedFields"] == before["managedFields"], "its field owners changed"
    assert len(pods) == 2
    figure("kept_cluster", seconds_suite=round(seconds, 1), replicas_after=len(pods))
