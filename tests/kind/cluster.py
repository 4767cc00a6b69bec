"""The kind cluster as the suite drives it: kubectl (kustomize, server-side apply, exec, logs),
the REST client for reads and watches, and the node's container runtime (crictl through
``docker exec``) for faults only a runtime delivers.

Every address is the cluster's own: its API server on 127.0.0.1, its node container, and the
Pods and Services inside it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from controllers.runtime import client as clients
from controllers.runtime import errors, objects, restconfig

REPO = Path(__file__).resolve().parents[2]
FIELD_MANAGER = "rotator-kind-suite"
"""Who applies the suite's manifests (server-side apply), as a user's ``kubectl apply`` would."""

DEPLOYMENTS = objects.Resource("apps", "v1", "deployments", "Deployment")
PODS = objects.Resource("", "v1", "pods", "Pod")
SERVICES = objects.Resource("", "v1", "services", "Service")
CLUSTERROLEBINDINGS = objects.Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)


def find_kubectl() -> str:
    """The control plane's own kubectl (``hack/testenv.sh``'s folder) when there is one, else
    the one on PATH. ``ROTATOR_KIND_KUBECTL`` overrides both."""
    if explicit := os.environ.get("ROTATOR_KIND_KUBECTL"):
        return explicit
    folders = [os.environ.get("KUBEBUILDER_ASSETS", "")]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rotator"
    folders += [str(p.parent) for p in sorted((cache / "controlplane").glob("*/kubectl"))]
    for folder in folders:
        candidate = Path(folder) / "kubectl"
        if folder and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("kubectl")
    if not found:
        raise RuntimeError("no kubectl: run hack/testenv.sh or install kubectl")
    return found


class CommandFailed(AssertionError):
    pass


class Cluster:
    """kubectl and the REST client against one kubeconfig, and the node's runtime."""

    def __init__(self, kubeconfig: Path, node: str) -> None:
        self.kubeconfig = kubeconfig
        self.node = node
        self.kubectl_path = find_kubectl()
        self.api = clients.Client(restconfig.load(str(kubeconfig)))

    # --- kubectl -----------------------------------------------------------------------------

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        command = [self.kubectl_path, "--kubeconfig", str(self.kubeconfig), *args]
        done = subprocess.run(
            command, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            # kubectl's own words; the suite never passes a secret value on a command line
            raise CommandFailed(
                f"kubectl {' '.join(args[:4])} … exited {done.returncode}: {done.stderr[-2000:]}"
            )
        return done

    def kustomize(self, folder: Path) -> list[dict[str, Any]]:
        out = self.kubectl("kustomize", str(folder)).stdout
        return [d for d in yaml.safe_load_all(out) if d]

    def apply(self, docs: Iterable[dict[str, Any]], *, field_manager: str = FIELD_MANAGER) -> None:
        """``kubectl apply --server-side``, taking over fields another manager set (a user's
        re-apply of their manifests)."""
        text = yaml.safe_dump_all(list(docs), sort_keys=False)
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            f"--field-manager={field_manager}",
            "-f",
            "-",
            input=text,
            timeout=300,
        )

    def delete(self, docs: Iterable[dict[str, Any]], *, wait: bool = True) -> None:
        text = yaml.safe_dump_all(list(docs), sort_keys=False)
        self.kubectl(
            "delete",
            "--ignore-not-found",
            f"--wait={'true' if wait else 'false'}",
            "--timeout=180s",
            "-f",
            "-",
            input=text,
            timeout=240,
        )

    def exec_python(
        self,
        namespace: str,
        pod: str,
        code: str,
        *,
        container: str | None = None,
        stdin: str | None = None,
        timeout: float = 60,
    ) -> str:
        """Runs ``python -c code`` in a running container; ``stdin`` is how a test hands it
        anything secret (never on the command line)."""
        args = ["exec", "-i", "-n", namespace, pod]
        if container:
            args += ["-c", container]
        args += ["--", "python", "-c", code]
        return self.kubectl(*args, input=stdin or "", timeout=timeout).stdout

    # --- the node's runtime ------------------------------------------------------------------

    def crictl(self, *args: str) -> str:
        done = subprocess.run(
            ["docker", "exec", self.node, "crictl", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise CommandFailed(f"crictl {' '.join(args)} exited {done.returncode}: {done.stderr}")
        return done.stdout

    def container_id(self, namespace: str, pod: str, container: str) -> str:
        """The runtime's id of a Pod's running container."""
        out = self.crictl(
            "ps",
            "-q",
            "--state",
            "running",
            "--name",
            f"^{container}$",
            "--label",
            f"io.kubernetes.pod.name={pod}",
            "--label",
            f"io.kubernetes.pod.namespace={namespace}",
        ).split()
        assert len(out) == 1, f"{len(out)} running {container} containers in {pod}: {out}"
        return out[0]

    # --- reads -------------------------------------------------------------------------------

    def get(
        self, resource: objects.Resource, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        try:
            return dict(self.api.get(resource, name, namespace=namespace))
        except errors.NotFound:
            return None

    def items(
        self,
        resource: objects.Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        body = self.api.list(resource, namespace=namespace, label_selector=label_selector)
        return list(body.get("items") or [])

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        body = {"metadata": {"name": name, "labels": labels or {}}}
        with contextlib.suppress(errors.AlreadyExists):
            self.api.create(objects.NAMESPACES, body)

    def delete_namespace(self, *names: str, timeout: float = 180) -> None:
        """Deletes namespaces and waits until they are gone (their finalizers ran: an IAM-key
        policy's needs the controller, which is why modules delete theirs while it runs); several
        at once are deleted side by side, in one call."""
        self.kubectl(
            "delete",
            "namespace",
            *names,
            "--ignore-not-found",
            f"--timeout={int(timeout)}s",
            timeout=timeout + 30,
        )

    def token(self, namespace: str, account: str, *, audience: Sequence[str] = ()) -> str:
        """A TokenRequest's token for a ServiceAccount (kept by the caller, never printed)."""
        spec: dict[str, Any] = {"expirationSeconds": 3600}
        if audience:
            spec["audiences"] = list(audience)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        answer = self.api.create(
            objects.SERVICEACCOUNTS, body, namespace=namespace, name=account, subresource="token"
        )
        return str(answer["status"]["token"])


def idle_pod(
    name: str,
    image: str,
    *,
    command: Sequence[str] = ("python", "-c", "import signal; signal.pause()"),
    volumes: Sequence[dict[str, Any]] = (),
    mounts: Sequence[dict[str, Any]] = (),
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Pod of an image already on the node (never pulled), non-root and locked down as the
    restricted profile asks, running ``command`` (by default: waiting for SIGTERM, to be
    exec'd into)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": list(command),
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": list(mounts),
                }
            ],
            "volumes": list(volumes),
        },
    }


def running(cluster: Cluster, namespace: str, name: str) -> bool:
    pod = cluster.get(PODS, name, namespace) or {}
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all("running" in (s.get("state") or {}) for s in statuses)
