"""The Helm chart (charts/rotator) as tests see it: Helm built once by hack/helm.sh (cached, like
the control plane), ``helm template`` renders in parallel, and a structural diff of two renders,
so a test can say exactly what one value changes."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rotator_devkit.devenv import manifests

REPO = manifests.REPO
CHART = REPO / "charts" / "rotator"
RELEASE = "rotator"
NAMESPACE = "rotator-system"

HELM_LABELS = frozenset(
    {
        "helm.sh/chart",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
    }
)
"""Labels Helm charts add by convention (config/ has none of them)."""

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
Identity = tuple[str, str, str]
Path_ = tuple[str | int, ...]


@functools.cache
def binary() -> Path:
    """hack/helm.sh's helm: built from its Go module the first time (minutes), then found in the
    cache (milliseconds). One build per process; hack/helm.sh's lock makes workers share it."""
    out = subprocess.run(
        [str(REPO / "hack" / "helm.sh")], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"hack/helm.sh failed ({out.returncode}): {out.stderr[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def environment() -> dict[str, str]:
    """The process environment with Helm's cache, config and data homes in a folder of the tests'
    own, so that no test reads or writes the user's Helm repositories, plugins or registry logins."""
    home = Path(tempfile.gettempdir()) / "rotator-tests-helm-home"
    return os.environ | {
        f"HELM_{what}_HOME": str(home / what.lower()) for what in ("CACHE", "CONFIG", "DATA")
    }


@dataclass(frozen=True)
class Render:
    """One ``helm template``: the objects, or Helm's error when it refused (schema, fail)."""

    docs: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""

    def by_identity(self) -> dict[Identity, dict[str, Any]]:
        assert not self.error, self.error
        return {identity(d): d for d in self.docs}

    def one(self, kind: str) -> dict[str, Any]:
        (found,) = [d for d in self.docs if d["kind"] == kind]
        return found


@dataclass(frozen=True)
class Case:
    """The arguments of one ``helm template``."""

    values: Mapping[str, Any] = field(default_factory=dict)
    release: str = RELEASE
    namespace: str = NAMESPACE
    with_tests: bool = False


def template(case: Case) -> Render:
    """``helm template RELEASE charts/rotator -n NAMESPACE -f values.json`` (JSON is YAML)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as values:
        json.dump(dict(case.values), values)
        values.flush()
        argv = [str(binary()), "template", case.release, str(CHART), "-n", case.namespace]
        argv += ["-f", values.name]
        if not case.with_tests:
            argv.append("--skip-tests")
        out = subprocess.run(argv, capture_output=True, text=True, check=False, env=environment())
    if out.returncode != 0:
        return Render(error=out.stderr.strip())
    # libyaml's loader: PyYAML's own takes ~0.1 s per render (the CRDs), longer than Helm
    return Render(docs=[d for d in yaml.load_all(out.stdout, Loader=LOADER) if d])


def template_all(cases: Mapping[str, Case]) -> dict[str, Render]:
    """Every case rendered, four ``helm template`` processes at a time (each is ~0.3 s, mostly
    Helm's start)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(cases, pool.map(template, cases.values()), strict=True))


def identity(doc: Mapping[str, Any]) -> Identity:
    return (doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace", ""))


def flatten(value: Any, prefix: Path_ = ()) -> dict[Path_, Any]:
    """Leaves by path: mappings by key, lists of mappings by index; a list of scalars (args,
    verbs) is one leaf, so that an insertion reads as the new list, not as shifted indices."""
    if isinstance(value, Mapping):
        if not value:
            return {prefix: {}}
        out: dict[Path_, Any] = {}
        for key, child in value.items():
            out.update(flatten(child, (*prefix, key)))
        return out
    if isinstance(value, list) and any(isinstance(v, (Mapping, list)) for v in value):
        out = {}
        for index, child in enumerate(value):
            out.update(flatten(child, (*prefix, index)))
        return out
    return {prefix: value}


REMOVED = "<removed>"


@dataclass(frozen=True)
class Diff:
    """What a render has that another has not: objects added and removed, and per object in
    both, each leaf whose value changed (the new value, or REMOVED)."""

    added: set[Identity]
    removed: set[Identity]
    changed: dict[Identity, dict[Path_, Any]]


def diff(before: Render, after: Render) -> Diff:
    old, new = before.by_identity(), after.by_identity()
    changed: dict[Identity, dict[Path_, Any]] = {}
    for key in old.keys() & new.keys():
        a, b = flatten(old[key]), flatten(new[key])
        leaves = {
            p: b.get(p, REMOVED)
            for p in a.keys() | b.keys()
            if a.get(p, REMOVED) != b.get(p, REMOVED)
        }
        if leaves:
            changed[key] = leaves
    return Diff(added=new.keys() - old.keys(), removed=old.keys() - new.keys(), changed=changed)


def without_helm_metadata(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The object less what Helm adds by convention: its labels (HELM_LABELS) and its own
    annotations (helm.sh/*, such as helm.sh/resource-policy); empty maps left behind go too."""
    out: dict[str, Any] = json.loads(json.dumps(doc))
    metadata = out["metadata"]
    labels = {k: v for k, v in (metadata.get("labels") or {}).items() if k not in HELM_LABELS}
    annotations = {
        k: v for k, v in (metadata.get("annotations") or {}).items() if not k.startswith("helm.sh/")
    }
    for key, kept in (("labels", labels), ("annotations", annotations)):
        metadata.pop(key, None)
        if kept:
            metadata[key] = kept
    return out


def kustomize(folder: Path) -> list[dict[str, Any]]:
    """A kustomization of config/, rendered by ``kubectl kustomize`` when KUBEBUILDER_ASSETS
    holds kubectl (make test sets it), else by the dev kit's kustomize_lite (tests/e2e
    test_deploy and test_namespaced check that the two agree)."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    kubectl = Path(assets) / "kubectl" if assets else None
    return manifests.render(folder, kubectl=kubectl)
