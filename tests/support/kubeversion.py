"""Which Kubernetes an e2e run is against: the one hack/testenv.sh built for it.

``ROTATOR_KUBERNETES`` names it, as for ``hack/testenv.sh``: ``suite`` (unset; ``make test``,
hack/controlplane/kubernetes) or ``oldest`` (``make test-oldest``, the oldest supported,
hack/controlplane/kubernetes-oldest). Its version is the one pinned in that wrapper module's
go.mod, read here rather than written twice: the test that the binaries and the server report it
is what stops the oldest version's subset from passing against the suite's binaries unnoticed
(``KUBEBUILDER_ASSETS`` pointing elsewhere)."""

from __future__ import annotations

import os
import re

from tests.support.proc import REPO

MODULES = {"suite": "kubernetes", "oldest": "kubernetes-oldest"}
"""``ROTATOR_KUBERNETES`` → its wrapper module under hack/controlplane."""


def selected() -> str:
    """``suite`` or ``oldest``; anything else fails, as hack/testenv.sh does."""
    which = os.environ.get("ROTATOR_KUBERNETES") or "suite"
    if which not in MODULES:
        raise ValueError(f"ROTATOR_KUBERNETES={which!r}: expected one of {sorted(MODULES)}")
    return which


def pinned(which: str | None = None) -> str:
    """The ``k8s.io/kubernetes`` version pinned for ``which`` (default: :func:`selected`)."""
    go_mod = REPO / "hack" / "controlplane" / MODULES[which or selected()] / "go.mod"
    found = re.search(r"^\s*(?:require\s+)?k8s\.io/kubernetes (v\S+)", go_mod.read_text(), re.M)
    if found is None:
        raise ValueError(f"{go_mod} pins no k8s.io/kubernetes version")
    return found.group(1)
