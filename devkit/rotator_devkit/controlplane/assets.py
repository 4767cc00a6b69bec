"""Finding the control-plane binaries, controller-runtime's envtest convention."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

REQUIRED = ("etcd", "kube-apiserver", "kube-controller-manager")


class AssetsNotFound(Exception):
    """The control-plane binaries are not where we were told to look."""


def find(explicit: str | None = None, environ: Mapping[str, str] = os.environ) -> Path:
    """The folder holding etcd, kube-apiserver and kube-controller-manager.

    ``explicit`` (a flag), else ``KUBEBUILDER_ASSETS``. ``make testenv`` builds them and prints
    the folder as its last line.
    """
    folder = explicit or environ.get("KUBEBUILDER_ASSETS")
    if not folder:
        raise AssetsNotFound(
            "no control-plane binaries: set KUBEBUILDER_ASSETS (or pass --assets) to a folder "
            "with etcd, kube-apiserver and kube-controller-manager; `make testenv` builds them "
            "and prints that folder"
        )
    path = Path(folder)
    missing = [b for b in REQUIRED if not os.access(path / b, os.X_OK)]
    if missing:
        raise AssetsNotFound(f"{path} lacks executable {', '.join(missing)}")
    return path
