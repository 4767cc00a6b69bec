"""The typed API (controllers.reconcilers.api) and the CRD schemas name the same fields."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import pytest
import yaml

from controllers.reconcilers import api

CRDS = Path(__file__).resolve().parents[2] / "config" / "crd" / "bases"


def schema_of(kind_plural: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / f"rotator.dev_{kind_plural}.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _unwrap(tp: Any) -> Any:
    while get_origin(tp) in (typing.NotRequired, typing.Required):
        (tp,) = get_args(tp)
    return tp


def compare(schema: dict[str, Any], tp: Any, path: str, problems: list[str]) -> None:
    tp = _unwrap(tp)
    origin = get_origin(tp)
    if schema.get("type") == "array":
        assert origin is list, f"{path}: schema array, type {tp}"
        compare(schema["items"], get_args(tp)[0], f"{path}[]", problems)
        return
    if schema.get("type") != "object" or "properties" not in schema:
        return
    if not (isinstance(tp, type) and typing.is_typeddict(tp)):
        problems.append(f"{path}: schema object, typed as {tp}")
        return
    hints = get_type_hints(tp, include_extras=True)
    schema_props = set(schema["properties"])
    typed_props = set(hints)
    for missing in sorted(schema_props - typed_props):
        problems.append(f"{path}.{missing}: in the CRD, not in {tp.__name__}")
    for extra in sorted(typed_props - schema_props):
        problems.append(f"{path}.{extra}: in {tp.__name__}, not in the CRD")
    required = set(schema.get("required", ()))
    for name in sorted(schema_props & typed_props):
        hint = hints[name]
        optional = get_origin(hint) is typing.NotRequired or (
            name not in tp.__required_keys__  # type: ignore[attr-defined]
        )
        if name in required and optional:
            problems.append(f"{path}.{name}: required in the CRD, optional in {tp.__name__}")
        compare(schema["properties"][name], hint, f"{path}.{name}", problems)


@pytest.mark.parametrize(
    ("plural", "typed"),
    [
        ("backendsecuritypolicies", api.Policy),
        ("servicebackends", api.Backend),
        ("routes", api.Route),
    ],
)
def test_typed_api_matches_crd_schema(plural: str, typed: type) -> None:
    schema = schema_of(plural)
    problems: list[str] = []
    hints = get_type_hints(typed, include_extras=True)
    for part in ("spec", "status"):
        compare(schema["properties"][part], hints[part], part, problems)
    assert problems == []


def test_every_crd_has_the_rotator_category_and_status_subresource() -> None:
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        assert "rotator" in crd["spec"]["names"]["categories"], path.name
        (version,) = crd["spec"]["versions"]
        assert version["subresources"] == {"status": {}}, path.name
        assert crd["spec"]["scope"] == "Namespaced"


@pytest.mark.parametrize("kind_plural", ["backendsecuritypolicies", "servicebackends", "routes"])
def test_only_past_times_are_date_columns(kind_plural: str) -> None:
    """kubectl prints a ``date`` column as an age — ``<invalid>`` for a future time — so only
    times in the past (creation) may be dates; expiry and renewal are shown as timestamps."""
    crd = yaml.safe_load((CRDS / f"rotator.dev_{kind_plural}.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    dates = {c["jsonPath"] for c in version["additionalPrinterColumns"] if c["type"] == "date"}
    assert dates <= {".metadata.creationTimestamp", ".status.lastRotationTime"}
