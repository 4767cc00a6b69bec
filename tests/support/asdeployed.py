"""The controller's Python environment as the image has it, for the processes whose memory a
benchmark measures.

The tests run ``rotator run`` from the development virtualenv, which holds the test tools and the
dev kit beside the product's dependencies; the image (Dockerfile) installs the product's alone. A
library that imports an optional module when it is installed then loads code in the benchmark
that it never loads as deployed: structlog imports ``rich`` (4.6 MiB of RSS) when present, and
``rich`` is here only for import-linter and LiteLLM. :func:`environment` hides every top-level
module that no distribution of the product's dependency closure provides, behind a package that
raises ``ImportError`` — what the import finds in the image. The closure is read from the
installed metadata (``rotator``'s requirements without extras, recursively), so it follows
pyproject.toml by itself.
"""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.proc import REPO

PRODUCT = "rotator"
KEPT = frozenset({"pip", "setuptools", "pkg_resources", "_distutils_hack"})
"""What every virtualenv has, the image's too."""


def closure(name: str = PRODUCT) -> set[str]:
    """The canonical names of ``name``'s distribution and all it requires (no extras)."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = canonicalize_name(todo.pop())
        if current in seen:
            continue
        seen.add(current)
        try:
            requires = metadata.distribution(current).requires or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def absent_modules() -> list[str]:
    """Top-level modules installed here that no distribution of the image provides."""
    image = closure()
    return sorted(
        module
        for module, dists in metadata.packages_distributions().items()
        if module.isidentifier()
        and module not in KEPT
        and not any(canonicalize_name(d) in image for d in dists)
    )


def environment(workdir: Path) -> dict[str, str]:
    """``PYTHONPATH`` for a controller process: the repository, then a folder under
    ``workdir`` where each of :func:`absent_modules` is a package that refuses to import."""
    hidden = workdir / "as-deployed"
    for module in absent_modules():
        package = hidden / module
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(
            f"raise ImportError({module!r} ' is not in the image (tests/support/asdeployed.py)')\n"
        )
    return {"PYTHONPATH": os.pathsep.join((str(REPO), str(hidden)))}
