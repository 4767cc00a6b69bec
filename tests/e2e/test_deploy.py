"""Running rotator as users will: config/default renders and applies, RBAC is proven by taking
a rule away, and the controller works from the in-cluster environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controllers.runtime import client as clients
from controllers.runtime import errors
from rotator_devkit.controlplane.cluster import LocalControlPlane
from rotator_devkit.devenv import manifests
from tests.support.chain import AWSChain
from tests.support.controller import SERVICE_ACCOUNT, ControllerProcess, in_cluster_environment
from tests.support.existing import ExistingCluster
from tests.support.polling import wait_for
from tests.support.proc import Proc

KINDS_IN_DEFAULT = {
    "Namespace",
    "CustomResourceDefinition",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Deployment",
    "Service",
}


def identities(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", "")) for d in docs}


def test_config_default_renders_the_same_with_kubectl_and_python(
    control_plane: LocalControlPlane,
) -> None:
    kubectl = control_plane.assets / "kubectl"
    rendered = manifests.render(manifests.CONFIG / "default", kubectl=kubectl)
    assert {d["kind"] for d in rendered} == KINDS_IN_DEFAULT
    assert identities(rendered) == identities(
        manifests.render(manifests.CONFIG / "default", kubectl=None)
    )
    deployment = next(d for d in rendered if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert deployment["spec"]["replicas"] == 2
    assert "--leader-elect" in container["args"]
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert {"livenessProbe", "readinessProbe", "resources"} <= set(container)


@pytest.mark.oldest_kubernetes
def test_config_default_applies_with_server_dry_run_then_for_real(
    control_plane: LocalControlPlane, api: clients.Client, installed: None
) -> None:
    """On a kept cluster (make e2e-kind, ROTATOR_E2E_KUBECONFIG) the installation is the
    cluster owner's: config/default is checked by a server-side dry run only, and the live
    Deployment must be left exactly as it was (applying it for real replaced its image with
    rotator:latest and its replicas, under another field manager)."""
    docs = manifests.render(manifests.CONFIG / "default", kubectl=control_plane.assets / "kubectl")
    deployments = manifests.KINDS["Deployment"]
    name, namespace = "rotator-controller-manager", "rotator-system"
    before = _live(api)
    manifests.apply(api, docs, dry_run=True)
    assert _live(api) == before, "a dry run changed nothing"
    if isinstance(control_plane, ExistingCluster):
        return
    manifests.apply(api, docs)
    deployment = api.get(deployments, name, namespace=namespace)
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "rotator:latest"


def _live(api: clients.Client) -> dict[str, Any] | None:
    """What the kept cluster's Deployment is: its spec and field owners, or None if absent."""
    try:
        found = api.get(
            manifests.KINDS["Deployment"], "rotator-controller-manager", namespace="rotator-system"
        )
    except errors.NotFound:
        return None
    return {"spec": found["spec"], "managedFields": found["metadata"].get("managedFields")}


def test_a_missing_rbac_rule_surfaces_as_forbidden(
    chain: AWSChain, controller: ControllerProcess, api: clients.Client
) -> None:
    role = manifests.KINDS["ClusterRole"]
    original = api.get(role, "rotator-manager-role")
    crippled = {
        **original,
        "rules": [r for r in original["rules"] if r.get("resources") != ["secrets"]]
        + [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}],
    }
    api.replace(role, crippled)
    try:
        chain.secret("key", apiKey="sk-rbac-negative-test-value")
        chain.api_key_policy("p", secret="key", targets=[])
        ready = chain.wait_condition("policy", "p", "Ready", "False", "Forbidden")
        assert "cannot patch resource" in ready["message"]
        wait_for(lambda: "Forbidden" in chain.event_reasons("p"), what="Forbidden event")
        assert "Forbidden" in controller.logs()
    finally:
        current = api.get(role, "rotator-manager-role")
        api.replace(
            role,
            {
                **original,
                "metadata": {
                    **original["metadata"],
                    "resourceVersion": current["metadata"]["resourceVersion"],
                },
            },
        )
    chain.wait_condition("policy", "p", "Ready", "True", "CredentialsReady", timeout=90)


def test_in_cluster_mode(
    control_plane: LocalControlPlane,
    api: clients.Client,
    chain: AWSChain,
    controller: ControllerProcess,
    tmp_path: Path,
) -> None:
    pod = in_cluster_environment(control_plane, api, tmp_path / "serviceaccount")
    controller.stop()  # one leader: the in-cluster process takes the Lease
    proc = Proc(
        [
            "-m",
            "controllers.cli",
            "run",
            "--leader-elect",
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
        ],
        tmp_path / "in-cluster.log",
        env={**pod, "HOME": str(tmp_path)},
    )
    try:
        chain.secret("key", apiKey="sk-in-cluster-test-value-1")
        chain.api_key_policy("p", secret="key", targets=["b"])
        chain.backend("b")
        chain.route("r", ["b"])
        chain.wait_condition("route", "r", "ResolvedRefs", "True", timeout=90)
        assert '"leader.elected"' in proc.log()
        assert proc.terminate() == 0
    finally:
        proc.close()
        controller.start()
