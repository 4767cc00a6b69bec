"""The project's manifests (config/), applied to a control plane as kustomize would render them."""

from __future__ import annotations

import copy
import functools
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import objects
from controllers.runtime.objects import Resource


def _checkout() -> Path:
    """The rotator checkout this dev kit sits in (the folder holding ``config/crd``)."""
    here = Path(__file__).resolve()
    for folder in here.parents:
        if (folder / "config" / "crd").is_dir():
            return folder
    raise RuntimeError(f"{here} is not inside a rotator checkout (no config/crd above it)")


REPO = _checkout()
CONFIG = REPO / "config"

NAMESPACE = "rotator-system"
FIELD_MANAGER = "rotator-manifests"
NAME_PREFIX = "rotator-"

RBAC = "rbac.authorization.k8s.io"
KINDS: dict[str, Resource] = {
    "Namespace": objects.NAMESPACES,
    "ServiceAccount": objects.SERVICEACCOUNTS,
    "ClusterRole": Resource(RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False),
    "ClusterRoleBinding": Resource(
        RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
    ),
    "Role": Resource(RBAC, "v1", "roles", "Role"),
    "RoleBinding": Resource(RBAC, "v1", "rolebindings", "RoleBinding"),
    "Secret": objects.SECRETS,
    "Service": Resource("", "v1", "services", "Service"),
    "Deployment": Resource("apps", "v1", "deployments", "Deployment"),
    "BackendSecurityPolicy": rapi.POLICIES,
    "ServiceBackend": rapi.BACKENDS,
    "Route": rapi.ROUTES,
    "CustomResourceDefinition": Resource(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        namespaced=False,
    ),
}


def load(folder: Path) -> list[dict[str, Any]]:
    """The documents a kustomization lists (resources only), in order."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    return [d for resource in kustomization["resources"] for d in load_file(folder / resource)]


def load_file(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kustomize(
    docs: Iterable[dict[str, Any]], *, namespace: str, prefix: str
) -> list[dict[str, Any]]:
    """kustomize's ``namespace`` and ``namePrefix`` for the kinds config/rbac uses."""
    out = []
    for original in docs:
        doc = copy.deepcopy(original)
        md = doc["metadata"]
        md["name"] = prefix + md["name"]
        if KINDS[doc["kind"]].namespaced:
            md["namespace"] = namespace
        if "roleRef" in doc:
            doc["roleRef"]["name"] = prefix + doc["roleRef"]["name"]
        for subject in doc.get("subjects") or []:
            subject["name"] = prefix + subject["name"]
            subject["namespace"] = namespace
        out.append(doc)
    return out


def apply(
    api: clients.Client,
    docs: Iterable[dict[str, Any]],
    *,
    namespace: str | None = None,
    dry_run: bool = False,
) -> None:
    """Server-side applies each document (``kubectl apply --server-side``), namespaced ones in
    ``namespace`` if they name none; with ``dry_run`` the server validates and admits them
    without storing anything."""
    for doc in docs:
        resource = KINDS[doc["kind"]]
        ns = objects.namespace(doc) or (namespace if resource.namespaced else None)
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        if dry_run:
            query.append(("dryRun", "All"))
        path = resource.path(namespace=ns, name=objects.name(doc))
        api.request("PATCH", path, query=query, body=doc, content_type=str(clients.PatchType.APPLY))


def wait(condition: Callable[[], bool], *, what: str, timeout: float = 60.0) -> None:
    """Polls ``condition`` every 0.1 s until it holds; TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        pause.wait(0.1)


def install_crds(api: clients.Client, config: Path = CONFIG) -> None:
    """Applies config/crd and waits until every CRD is established (its API is served)."""
    docs = load(config / "crd")
    apply(api, docs)
    crds = KINDS["CustomResourceDefinition"]

    def established(name: str) -> bool:
        # status and its conditions are null until the API server has looked at the CRD
        conditions = (api.get(crds, name).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    for doc in docs:
        name = doc["metadata"]["name"]
        wait(functools.partial(established, name), what=f"CRD {name} established")


def render(folder: Path, *, kubectl: Path | None) -> list[dict[str, Any]]:
    """A kustomization, rendered by ``kubectl kustomize`` when kubectl is there, else by
    :func:`kustomize_lite` (a test checks that both agree on config/default)."""
    if kubectl is not None and kubectl.exists():
        out = subprocess.run(
            [str(kubectl), "kustomize", str(folder)], capture_output=True, text=True, check=True
        ).stdout
        return [d for d in yaml.safe_load_all(out) if d]
    return kustomize_lite(folder)


def kustomize_lite(folder: Path) -> list[dict[str, Any]]:
    """What config/ uses of kustomize: nested ``resources``, ``patches`` (see :func:`_patch`),
    ``namespace``, ``namePrefix`` (not on Namespaces and CRDs; followed by roleRefs,
    serviceAccountName, and subjects that name a ServiceAccount of the build — kustomize leaves
    the others alone), ``labels`` without selectors, and ``images``."""
    k = yaml.safe_load((folder / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for resource in k.get("resources", []):
        path = folder / resource
        docs += kustomize_lite(path) if path.is_dir() else load_file(path)
    for patch in k.get("patches", []):
        docs = _patch(docs, patch)
    namespace, prefix = k.get("namespace"), k.get("namePrefix", "")
    accounts = {
        (d["metadata"]["name"], d["metadata"].get("namespace"))
        for d in docs
        if d["kind"] == "ServiceAccount"
    }
    for doc in docs:
        md = doc["metadata"]
        for group in k.get("labels", []):
            md.setdefault("labels", {}).update(group.get("pairs", {}))
        if doc["kind"] == "Namespace":
            md["name"] = namespace or md["name"]
            continue
        if doc["kind"] != "CustomResourceDefinition":
            md["name"] = prefix + md["name"]
        if namespace and KINDS[doc["kind"]].namespaced:
            md["namespace"] = namespace
        _follow(doc, prefix=prefix, namespace=namespace, accounts=accounts)
        pod = doc.get("spec", {}).get("template", {}).get("spec")
        for image in k.get("images", []):
            for container in (pod or {}).get("containers", []):
                if container["image"].split(":")[0] == image["name"]:
                    container["image"] = (
                        f"{image.get('newName', image['name'])}:{image.get('newTag', 'latest')}"
                    )
    return docs


def _follow(
    doc: dict[str, Any], *, prefix: str, namespace: str | None, accounts: set[tuple[str, str]]
) -> None:
    """The references kustomize renames with their objects: roleRefs, a pod's
    serviceAccountName, and subjects naming a ServiceAccount of the build (``accounts``)."""
    if "roleRef" in doc:
        doc["roleRef"]["name"] = prefix + doc["roleRef"]["name"]
    for subject in doc.get("subjects") or []:
        if (subject["name"], subject.get("namespace")) in accounts:
            subject["name"] = prefix + subject["name"]
            subject["namespace"] = namespace or subject.get("namespace")
    pod = doc.get("spec", {}).get("template", {}).get("spec")
    if pod and pod.get("serviceAccountName"):
        pod["serviceAccountName"] = prefix + pod["serviceAccountName"]


def _patch(docs: list[dict[str, Any]], patch: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry of ``patches``, of the two shapes config/ uses: an inline ``$patch: delete``
    that drops the object it names, and JSON 6902 ``add`` operations on a ``target``."""
    body = yaml.safe_load(patch["patch"])
    if isinstance(body, dict) and body.get("$patch") == "delete":
        named = (body["kind"], body["metadata"]["name"])
        return [d for d in docs if (d["kind"], d["metadata"]["name"]) != named]
    target = patch["target"]
    for doc in docs:
        if doc["kind"] == target["kind"] and doc["metadata"]["name"] == target.get(
            "name", doc["metadata"]["name"]
        ):
            for op in body:
                if op["op"] != "add":
                    raise ValueError(f"kustomize_lite applies JSON 6902 add only, not {op['op']}")
                _json_pointer_add(doc, op["path"], op["value"])
    return docs


def _json_pointer_add(doc: dict[str, Any], path: str, value: Any) -> None:
    """RFC 6902 ``add``: ``-`` appends to a list, an index inserts, a key sets."""
    *parents, last = [t.replace("~1", "/").replace("~0", "~") for t in path.split("/")[1:]]
    node: Any = doc
    for token in parents:
        node = node[int(token)] if isinstance(node, list) else node[token]
    if isinstance(node, list):
        node.insert(len(node) if last == "-" else int(last), copy.deepcopy(value))
    else:
        node[last] = copy.deepcopy(value)
