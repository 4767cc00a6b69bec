"""rotator installed the way a user installs it: ``kubectl kustomize config/default`` with only
the image changed, applied server-side; upgraded by applying the new CRDs first, then the rest;
removed with everything it created (its namespace, CRDs, cluster roles and bindings).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from controllers.runtime import objects
from tests.kind.cluster import DEPLOYMENTS, PODS, REPO, Cluster
from tests.support.polling import wait_for

NAMESPACE = "rotator-system"
DEPLOYMENT = "rotator-controller-manager"
CONTAINER = "manager"
SELECTOR = "app.kubernetes.io/name=rotator,app.kubernetes.io/component=controller"
LEASE = "rotator-leader-election"
METRICS_SERVICE = "rotator-controller-manager-metrics-service"
READER_ROLE = "rotator-metrics-reader"
CRDS = objects.Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)
SHIPPED = REPO / "config" / "default"
OVERLAYS = Path(__file__).parent / "manifests"
ROLLOUT_TIMEOUT = 240.0


def reader_binding(name: str, namespace: str, account: str) -> dict[str, Any]:
    """A ClusterRoleBinding of :data:`READER_ROLE` to a ServiceAccount: what lets a scraper read
    /metrics (docs/operations.md, "Metrics")."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": READER_ROLE,
        },
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }


def render(cluster: Cluster, folder: Path, image: str) -> list[dict[str, Any]]:
    """The kustomization's documents with the controller container's image set to ``image``
    (what ``kustomize edit set image`` does), nothing else changed."""
    docs = cluster.kustomize(folder)
    for doc in docs:
        if doc["kind"] == "Deployment":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                if container["name"] == CONTAINER:
                    container["image"] = image
    return docs


def deployment_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == "Deployment")


def controller_pods(cluster: Cluster) -> list[dict[str, Any]]:
    return cluster.items(PODS, namespace=NAMESPACE, label_selector=SELECTOR)


def ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def rolled_out(cluster: Cluster) -> list[dict[str, Any]] | None:
    """The controller Pods, once the Deployment's newest template runs in every replica, each
    Ready, and no other Pod is left (not even one terminating); else None."""
    deployment = cluster.get(DEPLOYMENTS, DEPLOYMENT, NAMESPACE)
    if deployment is None:
        return None
    spec, status = deployment["spec"], deployment.get("status") or {}
    want = spec.get("replicas", 1)
    if status.get("observedGeneration", 0) < deployment["metadata"]["generation"]:
        return None
    counts = [status.get(k, 0) for k in ("replicas", "updatedReplicas", "readyReplicas")]
    if counts != [want] * 3 or status.get("availableReplicas", 0) != want:
        return None
    pods = controller_pods(cluster)
    if len(pods) != want or not all(ready(p) for p in pods):
        return None
    return pods


def holder(cluster: Cluster) -> str:
    """The Lease's holderIdentity ('' when released): ``<hostname>_<8 hex>``, new at each start
    of a container."""
    lease = cluster.get(objects.LEASES, LEASE, NAMESPACE) or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def leader(cluster: Cluster) -> str:
    """The Pod holding the Lease ('' when released)."""
    identity = holder(cluster)
    return identity.rsplit("_", 1)[0] if identity else ""


class Installation:
    """The one rotator installation of the session: what was applied, so it can be removed."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self.docs: list[dict[str, Any]] = []

    def install(self, docs: list[dict[str, Any]]) -> float:
        """Applies ``docs``; returns the seconds until every replica was Ready."""
        started = time.monotonic()
        self._remember(docs)
        self._cluster.apply(docs)
        self.wait_rolled_out()
        return time.monotonic() - started

    def upgrade(self, docs: list[dict[str, Any]]) -> None:
        """As a user upgrades: the new CRDs first (established before anything else changes),
        then the rest; returns once the new Pods run."""
        crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
        self._remember(docs)
        self._cluster.apply(crds)
        for crd in crds:
            name = crd["metadata"]["name"]
            self._cluster.kubectl(
                "wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s"
            )
        self._cluster.apply([d for d in docs if d["kind"] != "CustomResourceDefinition"])

    def wait_rolled_out(self, timeout: float = ROLLOUT_TIMEOUT) -> list[dict[str, Any]]:
        return wait_for(
            lambda: rolled_out(self._cluster),
            timeout=timeout,
            interval=0.2,
            what=f"deployment {DEPLOYMENT} rolled out, every replica Ready",
        )

    def remove(self) -> None:
        """Deletes what was installed and waits until it is gone."""
        if not self.docs:
            return
        self._cluster.delete(self.docs)
        self.docs = []

    def _remember(self, docs: list[dict[str, Any]]) -> None:
        known = {(d["kind"], d["metadata"]["name"]) for d in self.docs}
        self.docs += [
            copy.deepcopy(d) for d in docs if (d["kind"], d["metadata"]["name"]) not in known
        ]
