"""An existing cluster (kind) standing in for the local control plane: what the fixtures read
of a control plane — kubeconfig, server, CA, API server port — taken from a kubeconfig."""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml


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
