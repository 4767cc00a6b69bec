"""config/samples as a kustomization lists them (the dev-kit image holds a copy: the dev kit's
manifest tools look for a checkout, which an image is not)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def load(folder: Path) -> list[dict[str, Any]]:
    """The documents of the resources ``folder/kustomization.yaml`` lists, in order."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    return [
        doc
        for resource in kustomization["resources"]
        for doc in yaml.safe_load_all((folder / resource).read_text())
        if doc
    ]
