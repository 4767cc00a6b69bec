"""Two managers, one Lease: only the leader reconciles; a successor takes over after a crash
(no sooner than the lease allows) and at once after a graceful stop (the lease is released)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from controllers.runtime import objects
from rotator_devkit.controlplane.cluster import free_port
from tests.support.polling import wait_for
from tests.support.proc import Proc
from tests.support.toy_manager import STAMP

pytestmark = pytest.mark.oldest_kubernetes

LEASE_DURATION = 15.0
RETRY_PERIOD = 2.0


def holder(api, namespace: str) -> str:
    lease = api.get(objects.LEASES, "toy-leader", namespace=namespace)
    return str(lease["spec"].get("holderIdentity") or "")


def stamped_by(api, namespace: str, name: str) -> str | None:
    cm = api.get(objects.CONFIGMAPS, name, namespace=namespace)
    return (cm["metadata"].get("annotations") or {}).get(STAMP)


def start_toy(control_plane, namespace: str, identity: str, tmp_path: Path) -> Proc:
    metrics, probes = free_port(), free_port()
    return Proc(
        [
            "-m",
            "tests.support.toy_manager",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--namespace",
            namespace,
            "--identity",
            identity,
            "--leader-elect",
            "--metrics-bind-address",
            f"127.0.0.1:{metrics}",
            "--health-probe-bind-address",
            f"127.0.0.1:{probes}",
        ],
        tmp_path / f"{identity}.log",
        metrics_port=metrics,
        probe_port=probes,
    )


def test_only_the_leader_reconciles_and_a_crash_hands_over_after_the_lease(
    control_plane, api, namespace, tmp_path
) -> None:
    a = start_toy(control_plane, namespace, "manager-a", tmp_path)
    b = None
    try:
        wait_for(lambda: holder(api, namespace) == "manager-a", timeout=60, what="a leads")
        b = start_toy(control_plane, namespace, "manager-b", tmp_path)
        wait_for(lambda: b.http(b.probe_port, "/readyz")[0] == 200, timeout=60, what="b ready")
        api.create(objects.CONFIGMAPS, {"metadata": {"name": "one"}}, namespace=namespace)
        wait_for(lambda: stamped_by(api, namespace, "one"), what="a reconciled")
        assert stamped_by(api, namespace, "one") == "manager-a"
        assert a.metric("leader_election_master_status", name="toy-leader") == 1
        assert b.metric("leader_election_master_status", name="toy-leader") == 0
        assert not b.metric(
            "controller_runtime_reconcile_total", controller="stamper", result="success"
        ), "the candidate reconciles nothing"

        a.kill()  # a crash: the lease is not released
        killed = time.monotonic()
        api.create(objects.CONFIGMAPS, {"metadata": {"name": "two"}}, namespace=namespace)
        wait_for(
            lambda: holder(api, namespace) == "manager-b",
            timeout=LEASE_DURATION + 4 * RETRY_PERIOD * 1.2 + 5,
            interval=0.1,
            what="b takes over",
        )
        takeover = time.monotonic() - killed
        print(f"\ntakeover after a crash: {takeover:.1f} s (lease {LEASE_DURATION:.0f} s)")
        assert takeover >= LEASE_DURATION - RETRY_PERIOD, "never while a's lease was live"
        wait_for(lambda: stamped_by(api, namespace, "two") == "manager-b", what="b reconciles")
        assert stamped_by(api, namespace, "one") == "manager-a"
    finally:
        a.close()
        if b is not None:
            b.close()


def test_graceful_stop_releases_the_lease_for_a_fast_handover(
    control_plane, api, namespace, tmp_path
) -> None:
    a = start_toy(control_plane, namespace, "manager-a", tmp_path)
    b = None
    try:
        wait_for(lambda: holder(api, namespace) == "manager-a", timeout=60, what="a leads")
        b = start_toy(control_plane, namespace, "manager-b", tmp_path)
        wait_for(lambda: b.http(b.probe_port, "/readyz")[0] == 200, timeout=60, what="b ready")
        stopped = time.monotonic()
        assert a.terminate() == 0, a.log()[-2000:]
        assert holder(api, namespace) in ("", "manager-b"), "released on the way out"
        wait_for(lambda: holder(api, namespace) == "manager-b", timeout=15, what="b takes over")
        print(f"\ntakeover after a graceful stop: {time.monotonic() - stopped:.1f} s")
        api.create(objects.CONFIGMAPS, {"metadata": {"name": "three"}}, namespace=namespace)
        wait_for(lambda: stamped_by(api, namespace, "three") == "manager-b", what="b reconciles")
    finally:
        a.close()
        if b is not None:
            b.close()
