"""docs/design.md §4's event-path table is the wiring: read from the builders
``setup.register`` returns (not from the Python source), row for row and in order, so that a
watch added, removed, re-filtered or re-mapped without the table fails here."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from controllers.reconcilers import setup
from controllers.reconcilers.credentialsources.apikey import APIKeySource
from controllers.runtime.builder import Wiring
from controllers.runtime.manager import Manager, ManagerOptions
from controllers.runtime.metrics import Metrics
from tests.support.fake_api import FakeTransport

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"
HEADER = ["controller", "source", "of", "when", "wakes"]

Row = tuple[str, ...]


def section(text: str, number: int) -> str:
    """The text of ``## <number>.`` up to the next ``## `` heading."""
    match = re.search(rf"^## {number}\. .*?(?=^## |\Z)", text, flags=re.M | re.S)
    assert match is not None, f"docs/design.md has no section {number}"
    return match.group(0)


def table_rows(text: str) -> Iterator[list[str]]:
    for line in text.splitlines():
        if line.startswith("|"):
            yield [cell.strip() for cell in line.strip().strip("|").split("|")]


def documented() -> list[Row]:
    """The rows of §4's event-path table (after its header and rule)."""
    rows = list(table_rows(section(DESIGN.read_text(encoding="utf-8"), 4)))
    assert rows[0] == HEADER, "§4's table is not the event-path table"
    assert set("".join(rows[1])) <= set("-:"), "the header is followed by its rule"
    return [tuple(r) for r in rows[2:]]


@pytest.fixture
def wiring() -> tuple[Wiring, ...]:
    options = ManagerOptions(metrics_bind_address="0", health_probe_bind_address="0")
    mgr = Manager(FakeTransport().client(), options, metrics=Metrics())
    return setup.register(mgr, by_type={"APIKey": APIKeySource()})


def wired(wiring: tuple[Wiring, ...]) -> list[Row]:
    return [
        (f"`{w.name}`", f"`{watch.verb}`", watch.of, watch.says, watch.wakes)
        for w in wiring
        for watch in w.watches
    ]


def test_the_event_path_table_is_the_wiring(wiring: tuple[Wiring, ...]) -> None:
    """Mutations caught: a watch added or removed in a ``wiring`` module, a predicate or a
    mapper changed, two watches reordered, a table row edited."""
    table, actual = documented(), wired(wiring)
    missing = [r for r in actual if r not in table]
    stale = [r for r in table if r not in actual]
    assert (missing, stale) == ([], []), (
        "docs/design.md §4 and the wiring differ; rows the table lacks: "
        f"{[' | '.join(r) for r in missing]}; rows no builder declares: "
        f"{[' | '.join(r) for r in stale]}"
    )
    assert table == actual, "the table lists the watches in the order they are declared"


def test_the_table_covers_every_controller_and_source(wiring: tuple[Wiring, ...]) -> None:
    """Positive control: the table is read at all, and the wiring has the three controllers."""
    assert [w.name for w in wiring] == ["backendsecuritypolicy", "servicebackend", "route"]
    assert len(documented()) == sum(len(w.watches) for w in wiring) >= 10


def test_the_section_names_where_the_wiring_lives() -> None:
    """The heading points at the wiring modules, and the text names each of them."""
    text = section(DESIGN.read_text(encoding="utf-8"), 4)
    assert "`controllers/reconcilers/*/wiring.py`" in text.splitlines()[0]
    folder = DESIGN.parents[1] / "controllers" / "reconcilers"
    modules = {f"{p.parent.name}/wiring.py" for p in folder.glob("*/wiring.py")}
    assert len(modules) == 3
    assert set(re.findall(r"`(\w+/wiring\.py)`", text)) == modules
