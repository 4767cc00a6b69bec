"""An existing cluster (kind) standing in for the local control plane: what the fixtures read
of a control plane — kubeconfig, server, CA, API server port — taken from a kubeconfig; and the
cluster's own rotator installation paused while the suite runs its controller, then left as it
was found."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from controllers.runtime import client as clients
from controllers.runtime import errors
from controllers.runtime.objects import Resource
from rotator_devkit.devenv import manifests
from tests.support.polling import wait_for


@dataclass(frozen=True)
class ExistingCluster:
    kubeconfig: Path
    server: str
    ca_file: Path
    assets: Path

    @property
    def apiserver_port(self) -> int:
        return urlsplit(self.server).port or 443


def existing_cluster(kubeconfig: Path, folder: Path) -> ExistingCluster:
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c for c in config["clusters"] if c["name"] == context["context"]["cluster"])[
        "cluster"
    ]
    ca_file = folder / "ca.crt"
    if "certificate-authority-data" in cluster:
        ca_file.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    else:
        ca_file.write_bytes(Path(cluster["certificate-authority"]).read_bytes())
    assets = Path(os.environ.get("KUBEBUILDER_ASSETS", "/nonexistent"))
    return ExistingCluster(kubeconfig, cluster["server"], ca_file, assets)


DEPLOYMENT_NAMESPACE = "rotator-system"
DEPLOYMENT = "rotator-controller-manager"
SUITE_MANAGER = "rotator-e2e-suite"
PODS = Resource("", "v1", "pods", "Pod")


@contextmanager
def live_controller_paused(api: clients.Client, *, timeout: float = 120.0) -> Iterator[None]:
    """A kept cluster's own rotator Deployment (config/default's) scaled to zero while the suite's
    controller holds the leader Lease, then put back as it was found: its replica count through
    the scale subresource, and its ``managedFields`` as they were, so that no field is left owned
    by the suite and the owner's next apply conflicts with nothing. Without a Deployment, or at
    zero replicas, nothing is touched.

    Why not re-apply config/default: that replaced the installed image and replica count under
    another field manager (ImagePullBackOff, then apply conflicts for the cluster's owner)."""
    deployments = manifests.KINDS["Deployment"]
    try:
        found = api.get(deployments, DEPLOYMENT, namespace=DEPLOYMENT_NAMESPACE)
    except errors.NotFound:
        yield
        return
    replicas = int(found["spec"].get("replicas", 1))
    if replicas == 0:
        yield
        return
    managed = found["metadata"].get("managedFields") or []
    selector = ",".join(f"{k}={v}" for k, v in found["spec"]["selector"]["matchLabels"].items())
    scale(api, 0)
    try:
        wait_for(
            lambda: (
                not api.list(PODS, namespace=DEPLOYMENT_NAMESPACE, label_selector=selector)["items"]
            ),
            timeout=timeout,
            what=f"the live {DEPLOYMENT} Pods gone",
        )
        yield
    finally:
        scale(api, replicas)
        api.patch(
            deployments,
            DEPLOYMENT,
            {"metadata": {"managedFields": managed}},
            namespace=DEPLOYMENT_NAMESPACE,
            field_manager=SUITE_MANAGER,
        )


def scale(api: clients.Client, replicas: int) -> None:
    api.patch(
        manifests.KINDS["Deployment"],
        DEPLOYMENT,
        {"spec": {"replicas": replicas}},
        namespace=DEPLOYMENT_NAMESPACE,
        subresource="scale",
        field_manager=SUITE_MANAGER,
    )
