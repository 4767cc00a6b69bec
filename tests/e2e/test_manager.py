"""The manager as operators see it: probes, metrics, in-cluster configuration, the CLI."""

from __future__ import annotations

import contextlib
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from controllers.runtime import client as clients
from controllers.runtime import errors, manager, objects, restconfig, sources
from controllers.runtime.metrics import Metrics
from controllers.runtime.reconcile import Request, Result
from rotator_devkit.controlplane.cluster import free_port
from tests.support.polling import wait_for
from tests.support.proc import Proc

WIDGETS = objects.Resource("test.rotator.dev", "v1", "widgets", "Widget")

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.rotator.dev"},
    "spec": {
        "group": "test.rotator.dev",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}
CRDS = objects.Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class Counting:
    def __init__(self) -> None:
        self.seen: list[Request] = []

    def reconcile(self, request: Request) -> Result:
        self.seen.append(request)
        return Result()


def test_readyz_fails_until_caches_sync_and_metrics_are_served(
    control_plane, api, namespace
) -> None:
    metrics = Metrics()
    probe_port, metrics_port = free_port(), free_port()
    measured = clients.Client(
        restconfig.load(str(control_plane.kubeconfig)), metrics=metrics.for_requests("local")
    )
    mgr = manager.Manager(
        measured,
        manager.ManagerOptions(
            namespaces=(namespace,),
            metrics_bind_address=f"127.0.0.1:{metrics_port}",
            health_probe_bind_address=f"127.0.0.1:{probe_port}",
            cache_sync_timeout=120,
        ),
        metrics=metrics,
    )
    # Widgets do not exist yet: their informer cannot sync until the CRD is installed.
    widgets = mgr.cache.informer(WIDGETS)
    reconciler = Counting()
    mgr.new_controller("widgets", reconciler).watch(sources.Kind(widgets))
    stop = threading.Event()
    runner = threading.Thread(target=mgr.run, args=(stop,))
    runner.start()
    try:
        wait_for(lambda: get(probe_port, "/healthz")[0] == 200, what="healthz answers at once")
        status, body = get(probe_port, "/readyz")
        assert status == 500
        assert "informers failed: not synced: widgets.test.rotator.dev" in body
        with contextlib.suppress(errors.AlreadyExists):
            api.create(CRDS, CRD)
        wait_for(lambda: get(probe_port, "/readyz")[0] == 200, timeout=60, what="ready once synced")
        wait_for(
            lambda: (
                api.get(WIDGETS, "w", namespace=namespace)
                if _create_widget(api, namespace)
                else None
            ),
            what="widget",
        )
        wait_for(lambda: Request(namespace, "w") in reconciler.seen, what="reconciled")
        _, text = get(metrics_port, "/metrics")
        for name in (
            "controller_runtime_reconcile_total",
            "controller_runtime_reconcile_errors_total",
            "controller_runtime_reconcile_time_seconds",
            "workqueue_depth",
            "workqueue_adds_total",
            "workqueue_queue_duration_seconds",
            "workqueue_work_duration_seconds",
            "workqueue_retries_total",
            "rest_client_requests_total",
        ):
            assert f"\n{name}" in text, name
        assert 'controller_runtime_reconcile_total{controller="widgets",result="success"}' in text
    finally:
        stop.set()
        runner.join(30)
    assert not runner.is_alive()


def _create_widget(api: clients.Client, namespace: str) -> bool:
    try:
        api.create(
            WIDGETS,
            {"apiVersion": "test.rotator.dev/v1", "kind": "Widget", "metadata": {"name": "w"}},
            namespace=namespace,
        )
    except errors.AlreadyExists:
        pass
    except errors.NotFound:  # the CRD's REST endpoint is not served yet
        return False
    return True


def test_in_cluster_configuration_is_used_when_present(
    control_plane, api, namespace, tmp_path: Path
) -> None:
    api.create(objects.SERVICEACCOUNTS, {"metadata": {"name": "rotator"}}, namespace=namespace)
    token = api.create(
        objects.SERVICEACCOUNTS,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        namespace=namespace,
        name="rotator",
        subresource="token",
    )["status"]["token"]
    (tmp_path / "token").write_text(token)
    (tmp_path / "ca.crt").write_bytes(control_plane.ca_file.read_bytes())
    (tmp_path / "namespace").write_text(namespace)
    environ = {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(control_plane.apiserver_port),
    }
    in_cluster = clients.Client(
        restconfig.load(None, in_cluster_dir=str(tmp_path), environ=environ)
    )
    review = in_cluster.create(
        objects.Resource(
            "authentication.k8s.io",
            "v1",
            "selfsubjectreviews",
            "SelfSubjectReview",
            namespaced=False,
        ),
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:rotator"
    assert restconfig.in_cluster_namespace(str(tmp_path)) == namespace


def test_no_configuration_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(restconfig.ConfigNotFound, match="pass --kubeconfig"):
        restconfig.load(None, in_cluster_dir=str(tmp_path), environ={})


def test_rotator_run_serves_probes_and_stops_cleanly_on_sigterm(
    control_plane, installed, tmp_path: Path
) -> None:
    metrics, probes = free_port(), free_port()
    proc = Proc(
        [
            "-m",
            "controllers.cli",
            "run",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--metrics-bind-address",
            f"127.0.0.1:{metrics}",
            "--metrics-secure=false",
            "--health-probe-bind-address",
            f"127.0.0.1:{probes}",
            "--leader-elect",
            "--leader-election-namespace",
            "default",
        ],
        tmp_path / "rotator.log",
        metrics_port=metrics,
        probe_port=probes,
    )
    try:
        wait_for(lambda: proc.http(probes, "/readyz")[0] == 200, timeout=60, what="ready")
        wait_for(
            lambda: (
                proc.metric("leader_election_master_status", name="rotator-leader-election") == 1
            ),
            timeout=30,
            what="leading",
        )
        assert proc.terminate() == 0
        log = proc.log()
        assert '"event": "manager.stopped"' in log
        assert '"event": "leader.released"' in log
    finally:
        proc.close()


def test_rotator_run_without_configuration_exits_2(tmp_path: Path) -> None:
    proc = Proc(
        ["-m", "controllers.cli", "run"],
        tmp_path / "rotator.log",
        env={"HOME": str(tmp_path), "KUBECONFIG": "", "KUBERNETES_SERVICE_HOST": ""},
    )
    try:
        assert proc.popen.wait(30) == 2
        assert "no Kubernetes configuration" in proc.log()
    finally:
        proc.close()


def test_leader_election_outside_a_cluster_needs_a_namespace(control_plane, tmp_path: Path) -> None:
    proc = Proc(
        [
            "-m",
            "controllers.cli",
            "run",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--leader-elect",
        ],
        tmp_path / "rotator.log",
    )
    try:
        assert proc.popen.wait(30) == 2
        assert "--leader-election-namespace is required" in proc.log()
    finally:
        proc.close()
