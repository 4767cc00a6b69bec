"""Measured figures, one parseable line each: ``kind-figure <name> key=value ...`` on stdout
(``pytest -s``) and as a property of the test suite in the junit XML (``--junitxml``), so the closing
note can quote them from either."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Record = Callable[[str, object], None]


def line(name: str, **values: Any) -> str:
    parts = " ".join(f"{key}={_format(value)}" for key, value in values.items())
    return f"kind-figure {name} {parts}"


def report(record: Record, name: str, **values: Any) -> str:
    """Prints and records the figure's line; returns it."""
    text = line(name, **values)
    print(f"\n{text}", flush=True)
    record(name, text)
    return text


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value).replace(" ", "_")
