"""What hack/e2e-kind.sh hands the suite: the cluster it created and the images it loaded.

Every value comes from the environment; without ``ROTATOR_KIND_KUBECONFIG`` there is no cluster
and every test of the suite skips, saying so (:data:`MISSING`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MISSING = (
    "no kind cluster: ROTATOR_KIND_KUBECONFIG is not set (make e2e-kind creates the cluster, "
    "loads the images and sets it)"
)


@dataclass(frozen=True)
class KindEnv:
    kubeconfig: Path
    """The cluster's kubeconfig; its API server listens on 127.0.0.1."""
    cluster: str
    """kind's cluster name; its single node is the container ``<cluster>-control-plane``."""
    image: str
    """This checkout's controller image, loaded into the node (never pulled)."""
    image_a: str
    """The image of the earlier commit the upgrade starts from ('' when not given)."""
    image_a_commit: str
    checkout_a: Path | None
    """A worktree of that commit: its config/ (CRDs and config/default)."""
    devkit_image: str
    """The stand-ins image (it has python: the suite's in-cluster consumers run it)."""

    @property
    def node(self) -> str:
        return f"{self.cluster}-control-plane"


def from_environment() -> KindEnv | None:
    kubeconfig = os.environ.get("ROTATOR_KIND_KUBECONFIG")
    if not kubeconfig:
        return None
    checkout_a = os.environ.get("ROTATOR_KIND_CHECKOUT_A")
    return KindEnv(
        kubeconfig=Path(kubeconfig),
        cluster=os.environ.get("ROTATOR_KIND_CLUSTER", "rotator-e2e"),
        image=os.environ.get("ROTATOR_KIND_IMAGE", "localhost/rotator:e2e"),
        image_a=os.environ.get("ROTATOR_KIND_IMAGE_A", ""),
        image_a_commit=os.environ.get("ROTATOR_KIND_IMAGE_A_COMMIT", ""),
        checkout_a=Path(checkout_a) if checkout_a else None,
        devkit_image=os.environ.get("ROTATOR_KIND_DEVKIT_IMAGE", ""),
    )
