"""rotator installed the Helm way (charts/rotator): the helm binary ``hack/helm.sh`` built, run
against the kind cluster's kubeconfig; values handed over as a file (never ``--set``, so a
value is never parsed twice); what a release rendered, read back from Helm itself
(``helm get manifest`` and ``helm get hooks``), so that the uninstall check covers every object
the chart made, whatever the values were.

Helm refuses to adopt an object it did not create, so a release needs a cluster without
config/default's cluster-wide objects (:func:`leftovers` names them).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.kind.cluster import REPO, Cluster, CommandFailed

CHART = REPO / "charts" / "rotator"
RELEASE = "rotator"
HELM_LABELS = "app.kubernetes.io/managed-by=Helm,app.kubernetes.io/instance=" + RELEASE
KEEP = "helm.sh/resource-policy"


def find_helm() -> str:
    """``HELM``, else the binary ``hack/helm.sh`` prints last (cached; built once from the Go
    module pinned in hack/helm/go.mod)."""
    if explicit := os.environ.get("HELM"):
        return explicit
    done = subprocess.run(
        [str(REPO / "hack" / "helm.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=REPO,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"hack/helm.sh exited {done.returncode}: {done.stderr[-1000:]}")
    return lines[-1]


def split_image(image: str) -> tuple[str, str]:
    """``registry:port/name:tag`` → (``registry:port/name``, ``tag``): the chart's
    image.repository and image.tag."""
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon <= slash:
        return image, "latest"
    return image[:colon], image[colon + 1 :]


@dataclass(frozen=True)
class Ref:
    """One object a release rendered: enough to find it again."""

    api_version: str
    kind: str
    name: str
    namespace: str | None

    @property
    def resource(self) -> str:
        """kubectl's ``Kind.version.group`` (core: ``Kind``), unambiguous for ``kubectl get``."""
        group, _, version = self.api_version.rpartition("/")
        return f"{self.kind}.{version}.{group}" if group else self.kind

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


def refs(manifest: str, default_namespace: str, cluster_kinds: frozenset[str]) -> set[Ref]:
    """The objects of a rendered manifest; a namespaced object without a namespace is in
    ``default_namespace``."""
    found = set()
    for doc in yaml.safe_load_all(manifest):
        if not doc:
            continue
        md = doc["metadata"]
        namespaced = doc["kind"] not in cluster_kinds
        namespace = (md.get("namespace") or default_namespace) if namespaced else None
        found.add(Ref(doc["apiVersion"], doc["kind"], md["name"], namespace))
    return found


CLUSTER_KINDS = frozenset(
    {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Namespace"}
)
"""The cluster-scoped kinds charts/rotator renders."""


class Release:
    """One Helm release of charts/rotator in one namespace of the cluster."""

    def __init__(
        self, cluster: Cluster, namespace: str, work: Path, *, helm: str | None = None
    ) -> None:
        self._cluster = cluster
        self.namespace = namespace
        self._work = work
        self.helm_path = helm or find_helm()
        self._values_written = 0
        self.rendered: set[Ref] = set()
        """Every object any revision rendered (templates and test hooks), for the uninstall."""

    def helm(self, *args: str, timeout: float = 300) -> str:
        command = [
            self.helm_path,
            "--kubeconfig",
            str(self._cluster.kubeconfig),
            "--namespace",
            self.namespace,
            *args,
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            # Helm's own words; the values the suite passes hold no secret
            raise CommandFailed(
                f"helm {' '.join(args[:2])} exited {done.returncode}: "
                f"{(done.stderr or done.stdout)[-3000:]}"
            )
        return done.stdout

    def _values_file(self, values: dict[str, Any]) -> str:
        self._values_written += 1
        path = self._work / f"values-{self._values_written}.yaml"
        path.write_text(yaml.safe_dump(values, sort_keys=False))
        return str(path)

    def install(self, values: dict[str, Any]) -> None:
        """``helm install`` (no ``--wait``: the caller waits for the rollout it means)."""
        self.helm("install", RELEASE, str(CHART), "-f", self._values_file(values))
        self._remember()

    def upgrade(self, values: dict[str, Any]) -> None:
        """``helm upgrade`` with exactly ``values`` (``--reset-values``: nothing carried over
        from the revision before, so each call states the whole change)."""
        self.helm("upgrade", RELEASE, str(CHART), "--reset-values", "-f", self._values_file(values))
        self._remember()

    def test(self, *, timeout: str = "5m") -> str:
        """``helm test``: its hooks' Pod must succeed; returns Helm's report."""
        return self.helm("test", RELEASE, "--timeout", timeout, timeout=420)

    def uninstall(self) -> None:
        """``helm uninstall --wait``: returns once every deleted object is gone."""
        self.helm("uninstall", RELEASE, "--wait", "--timeout", "4m", timeout=300)

    def deployed(self) -> bool:
        out = self.helm("list", "--filter", f"^{RELEASE}$", "--short", "--all")
        return bool(out.strip())

    def revision(self) -> int:
        status = yaml.safe_load(self.helm("status", RELEASE, "-o", "yaml"))
        return int(status["version"])

    def _remember(self) -> None:
        for what in ("manifest", "hooks"):
            text = self.helm("get", what, RELEASE)
            self.rendered |= refs(text, self.namespace, CLUSTER_KINDS)


def present(cluster: Cluster, wanted: set[Ref]) -> dict[Ref, dict[str, Any]]:
    """Which of ``wanted`` exist now, with their metadata (one kubectl call per namespace)."""
    found: dict[Ref, dict[str, Any]] = {}
    by_namespace: dict[str | None, list[Ref]] = {}
    for ref in wanted:
        by_namespace.setdefault(ref.namespace, []).append(ref)
    for namespace, group in by_namespace.items():
        args = ["get", "--ignore-not-found", "-o", "yaml"]
        if namespace:
            args += ["-n", namespace]
        args += [f"{r.resource}/{r.name}" for r in sorted(group, key=str)]
        body = yaml.safe_load(cluster.kubectl(*args).stdout or "{}") or {}
        items = body.get("items") or ([body] if body.get("kind") else [])
        for item in items:
            for ref in group:
                if (item["kind"], item["metadata"]["name"]) == (ref.kind, ref.name):
                    found[ref] = dict(item["metadata"])
    return found


def labelled(cluster: Cluster, kinds: set[str]) -> list[str]:
    """Every object of ``kinds`` (kubectl resource names), in any namespace, that carries the
    release's Helm labels."""
    out = cluster.kubectl(
        "get", ",".join(sorted(kinds)), "-A", "-l", HELM_LABELS, "-o", "name"
    ).stdout
    return sorted(line for line in out.splitlines() if line)


LEFTOVER_KINDS = ("customresourcedefinitions", "clusterroles", "clusterrolebindings")


def leftovers(cluster: Cluster) -> list[str]:
    """config/default's cluster-wide objects that Helm would refuse to adopt: rotator.dev CRDs
    and ``rotator-*`` ClusterRoles and ClusterRoleBindings not owned by this release."""
    found = []
    for kind in LEFTOVER_KINDS:
        body = yaml.safe_load(cluster.kubectl("get", kind, "-o", "yaml").stdout) or {}
        for item in body.get("items") or []:
            md = item["metadata"]
            name = md["name"]
            ours = name.endswith(".rotator.dev") or name.startswith("rotator-")
            owner = (md.get("annotations") or {}).get("meta.helm.sh/release-name")
            if ours and owner != RELEASE:
                found.append(f"{kind}/{name}")
    return found
