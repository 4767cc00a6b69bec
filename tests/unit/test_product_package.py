"""The product's wheel (what ``pip install .`` and the image install) holds the product only: no
stand-in, control-plane launcher or manifest tool — those are the dev kit's (devkit/)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEV_KIT = ("rotator_devkit/", "controllers/devenv/", "controllers/controlplane/", "standins/")


def test_the_product_wheel_holds_no_dev_kit(tmp_path: Path) -> None:
    # Built from a copy of the whole tree (the dev kit included: the package configuration must
    # leave it out), so no build/ folder of the checkout is reused or left behind.
    source = tmp_path / "src"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", ".*cache"),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(tmp_path / "dist"), str(source)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("rotator-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("controllers/reconcilers/") for n in names)  # positive control
    assert any(n.startswith("rotator/providers/") for n in names)
    leaked = [n for n in names if any(part in n for part in DEV_KIT)]
    assert not leaked, leaked
    requires = next(n for n in names if n.endswith("METADATA"))
    metadata = zipfile.ZipFile(wheel).read(requires).decode()
    depends = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert any("kubernetes" in line for line in depends)  # positive control
    assert not [line for line in depends if "moto" in line or "PyJWT" in line], depends
