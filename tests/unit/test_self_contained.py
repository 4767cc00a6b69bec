"""The repository is complete in itself: no file refers to a document outside it.

The design, the API contract and the operations guide live in ``docs/``. A pointer to a file
next to the checkout (a shared design note, say) reads as a contract to a newcomer, who has no
such file; so every file of the repository — tracked, or new and not ignored — is searched for
the forms such pointers took.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Spelled in pieces, so that this file does not match itself.
OUTSIDE = ("../" + "shared", "shared/" + "DESIGN", "DESIGN" + " §")
SKIPPED_DIRS = {".git", ".venv", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis"}


def repository_files() -> list[Path]:
    """Tracked files and new ones git does not ignore; without git, every file but caches."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
        files = [ROOT / name for name in listed.decode().split("\0") if name]
    else:
        files = [
            p
            for p in ROOT.rglob("*")
            if not SKIPPED_DIRS & set(p.relative_to(ROOT).parts)
            and not any(part.endswith(".egg-info") for part in p.parts)
        ]
    return [p for p in files if p.is_file()]  # a deleted file may still be listed


def references_outside(text: str) -> list[str]:
    return [
        f"line {number}: {line.strip()[:100]}"
        for number, line in enumerate(text.splitlines(), start=1)
        if any(pattern in line for pattern in OUTSIDE)
    ]


def test_the_search_finds_each_form_of_pointer() -> None:
    assert references_outside("see " + "../" + "shared/notes.md")
    assert references_outside("(a contract: " + "DESIGN" + " §4)")
    assert not references_outside("see docs/design.md, section 4")


def test_no_file_refers_outside_the_repository() -> None:
    files = repository_files()
    assert ROOT / "README.md" in files
    found = {}
    for path in files:
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        hits = references_outside(data.decode("utf-8", "replace"))
        if hits:
            found[str(path.relative_to(ROOT))] = hits
    assert found == {}, "point to docs/ instead"
