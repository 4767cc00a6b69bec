"""docs/api.md is the API contract, so it must not drift from the code: its field reference is
exactly what hack/gen-api-docs.py makes of the CRDs, and its hand-written sections name every
condition type, reason, annotation, label, finalizer, derived Secret key and metric the code
uses."""

from __future__ import annotations

import ast
import difflib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "api.md"
CRDS = ROOT / "config" / "crd" / "bases"
REASON_SOURCES = ("controllers/reconcilers", "rotator")
"""Where the reasons users see are defined: the reconcilers and the credential engine's errors."""
METRIC_SOURCES = ("controllers", "rotator")
METRIC_TYPES = {"Counter", "Gauge", "Histogram", "Summary"}
REASON_ARGUMENT = {"event": 2, "Unresolved": 0}
"""Calls whose positional argument at this index is a reason: ``recorder.event(obj, type,
reason, message)`` and the Route reconciler's ``Unresolved(reason, message)``."""


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_api_docs", ROOT / "hack" / "gen-api-docs.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_the_field_reference_is_what_the_generator_makes_of_the_crds(
    generator: ModuleType, doc: str
) -> None:
    wanted = generator.splice(doc, generator.render(generator.load_crds()))
    diff = list(difflib.unified_diff(doc.splitlines(), wanted.splitlines(), lineterm="", n=1))
    assert wanted == doc, (
        "docs/api.md is stale: run .venv/bin/python hack/gen-api-docs.py\n" + "\n".join(diff[:40])
    )


def _literal(value: object) -> str:
    """A default as YAML writes it: ``443``, ``true``, ``1h``."""
    return value if isinstance(value, str) else yaml.safe_dump(value).split()[0]


def _schema_facts(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, str]]:
    """(field path, text the reference must show for it): every field, default, enum value,
    pattern and CEL rule message, found independently of the generator's own walk."""
    for rule in schema.get("x-kubernetes-validations") or ():
        yield path or "(object)", " ".join(rule["message"].split())
    for name, sub in (schema.get("properties") or {}).items():
        if not path and name in ("apiVersion", "kind", "metadata"):
            continue
        here = f"{path}.{name}" if path else name
        yield here, f"`{here}`"
        if "default" in sub:
            yield here, f"`{_literal(sub['default'])}`"
        for value in sub.get("enum") or ():
            yield here, f"`{value}`"
        if "pattern" in sub:
            yield here, sub["pattern"].replace("|", "\\|")
        node = sub
        for rule in sub.get("x-kubernetes-validations") or ():
            yield here, " ".join(rule["message"].split())
        if sub.get("type") == "array":
            node, here = sub["items"], f"{here}[]"
            for rule in node.get("x-kubernetes-validations") or ():
                yield here, " ".join(rule["message"].split())
        if node.get("type") == "object":
            yield from _schema_facts({**node, "x-kubernetes-validations": []}, here)


def test_the_field_reference_shows_every_field_default_enum_pattern_and_rule(
    generator: ModuleType,
) -> None:
    generated = generator.render(generator.load_crds())
    missing = []
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        (version,) = crd["spec"]["versions"]
        for field, text in _schema_facts(version["schema"]["openAPIV3Schema"]):
            if text not in generated:
                missing.append(f"{path.name} {field}: {text}")
    assert missing == []


def _python_files(*folders: str) -> Iterator[Path]:
    for folder in folders:
        yield from sorted((ROOT / folder).rglob("*.py"))


def _call_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` assignments."""
    found = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def _text(node: ast.expr, constants: dict[str, str]) -> str | None:
    """A string literal, or a constant it names (``READY``, ``api.REASON_X``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.Attribute):
        return constants.get(node.attr)
    return None


def _condition_constructors() -> set[str]:
    """The functions of conditions.py that build one condition type (``return Cond(TYPE, …)``),
    whose first argument is the reason: ``ready(REASON, message, ok=…)``."""
    tree = ast.parse((ROOT / "controllers/reconcilers/conditions.py").read_text(encoding="utf-8"))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and node.args.args
        and node.args.args[0].arg == "reason"
        and any(
            isinstance(ret, ast.Return)
            and isinstance(ret.value, ast.Call)
            and _call_name(ret.value) == "Cond"
            for ret in ast.walk(node)
        )
    }


def contract_names() -> tuple[set[str], set[str]]:
    """(condition types, reasons) the code sets: condition updates ``true(TYPE, REASON, …)`` /
    ``false(…)``, Event reasons ``recorder.event(obj, kind, REASON, …)``, ``Unresolved(REASON,
    …)``, the ``reason`` of every error class, and the ``REASON_*`` constants."""
    trees = [ast.parse(p.read_text(encoding="utf-8")) for p in _python_files(*REASON_SOURCES)]
    constants: dict[str, str] = {}
    for tree in trees:
        constants.update(_string_constants(tree))
    types: set[str] = set()
    reasons = {v for k, v in constants.items() if k.startswith("REASON_")}
    constructors = _condition_constructors()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if (
                        isinstance(item, ast.Assign)
                        and [getattr(t, "id", None) for t in item.targets] == ["reason"]
                        and (text := _text(item.value, constants))
                    ):
                        reasons.add(text)
            if not isinstance(node, ast.Call):
                continue
            kind, reason = _call_names(node, constants, constructors)
            types.update([kind] if kind else [])
            reasons.update([reason] if reason else [])
    return types, reasons


def _call_names(
    call: ast.Call, constants: dict[str, str], constructors: set[str]
) -> tuple[str | None, str | None]:
    """(condition type, reason) that one call names, each None when it names none."""
    name, args = _call_name(call), call.args
    if name in ("true", "false") and len(args) >= 2:
        return _text(args[0], constants), _text(args[1], constants)
    if name == "Cond" and args:
        return _text(args[0], constants), None  # a constructor of one type (conditions.ready)
    at = 0 if name in constructors else REASON_ARGUMENT.get(name)
    if at is not None and len(args) > at:
        return None, _text(args[at], constants)
    return None, None


def test_the_reason_collector_finds_what_the_reconcilers_set() -> None:
    types, reasons = contract_names()
    assert {"Accepted", "Ready", "ResolvedRefs", "Programmed", "RenewBeforeHonored"} <= types
    assert {"CredentialsReady", "SecretNotFound", "PolicyConflict", "BackendNotFound"} <= reasons
    assert {"ConfigTooLarge", "CredentialsRotated", "ServiceAccountNotPermitted"} <= reasons


def test_every_condition_type_and_reason_is_documented(doc: str) -> None:
    types, reasons = contract_names()
    assert sorted(n for n in types | reasons if f"`{n}`" not in doc) == []


def test_every_annotation_label_finalizer_and_derived_key_is_documented(doc: str) -> None:
    api = _string_constants(
        ast.parse((ROOT / "controllers/reconcilers/api/names.py").read_text(encoding="utf-8"))
    )
    names = {
        value
        for name, value in api.items()
        if name.endswith(("_ANNOTATION", "_LABEL", "_FINALIZER_PREFIX", "_ANNOTATION_PREFIX"))
        or name.startswith("FINALIZER_")
        or name in ("MANAGED_BY", "ROUTE_CONFIG_KEY")
    }
    for path in _python_files("rotator/providers"):
        names.update(
            v
            for k, v in _string_constants(ast.parse(path.read_text(encoding="utf-8"))).items()
            if k == "DATA_KEY"
        )
    assert {"rotator.dev/rotate-requested-at", "apiKey", "gcpAccessToken"} <= names
    assert sorted(n for n in names if n not in doc) == []


def metric_names() -> set[str]:
    """Names given to Prometheus metric constructors (counters as exposed, ``_total``)."""
    names = set()
    for path in _python_files(*METRIC_SOURCES):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and _call_name(node) in METRIC_TYPES and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    name = first.value
                    if _call_name(node) == "Counter" and not name.endswith("_total"):
                        name += "_total"
                    names.add(name)
    return names


def test_every_metric_is_documented(doc: str) -> None:
    names = metric_names()
    assert {"controller_runtime_reconcile_total", "rotator_rotations_total"} <= names
    assert sorted(n for n in names if f"`{n}`" not in doc) == []
