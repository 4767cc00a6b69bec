"""The ``rotator.dev/spec-hash`` forms (controllers/reconcilers/spechash.py): today's hashes what a
credential means (defaults as if absent), the form rotator up to b786434 recorded still reads as
the same spec, and 1f52da0's ``{"block": null}`` form is recognised as untrustworthy."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from controllers.reconcilers import api, spechash
from controllers.reconcilers.spechash import Verdict

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "config" / "crd" / "bases" / "rotator.dev_backendsecuritypolicies.yaml"


@functools.cache
def spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    return cast(dict[str, Any], version["schema"]["openAPIV3Schema"]["properties"]["spec"])


def crd_defaults(schema: dict[str, Any], path: str = "") -> dict[str, Any]:
    """The defaults the CRD schema declares under ``schema``, nested as the table is."""
    out: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        nested = crd_defaults(prop, f"{path}.{name}")
        if "default" in prop:
            unexpressible = f"{path}.{name}: the defaults table cannot express it"
            assert not nested, unexpressible  # defaults under a defaulted field
            assert not isinstance(prop["default"], dict), unexpressible  # an object default
            out[name] = prop["default"]
        elif nested:
            out[name] = nested
        assert prop.get("type") != "array" or not crd_defaults(prop["items"]), (
            f"{path}.{name}: defaults inside array items; the defaults table cannot express it"
        )
    return out


def defaulted_by_crd(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` as the API server serves it: the CRD's defaults filled in (read from the YAML,
    not from the table under test)."""
    if isinstance(value, dict) and "properties" in schema:
        for name, prop in schema["properties"].items():
            if name not in value and "default" in prop:
                value[name] = copy.deepcopy(prop["default"])
            if name in value:
                defaulted_by_crd(value[name], prop)
    elif isinstance(value, list) and "items" in schema:
        for item in value:
            defaulted_by_crd(item, schema["items"])
    return value


def leaves(table: dict[str, Any], path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out: dict[tuple[str, ...], Any] = {}
    for name, value in table.items():
        if isinstance(value, dict):
            out.update(leaves(value, (*path, name)))
        else:
            out[(*path, name)] = value
    return out


@functools.cache
def samples() -> list[tuple[str, api.PolicySpec]]:
    found = []
    for path in sorted((ROOT / "config" / "samples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "BackendSecurityPolicy":
                found.append((doc["metadata"]["name"], cast(api.PolicySpec, doc["spec"])))
    return found


def served(spec: api.PolicySpec) -> api.PolicySpec:
    return cast(api.PolicySpec, defaulted_by_crd(copy.deepcopy(dict(spec)), spec_schema()))


# What rotator at b786434 recorded for each sample, as the API server served it (computed with
# b786434's derived.spec_hash; the e2e upgrade test checks the same against that version run).
RECORDED_AT_B786434 = {
    "openai": "872c11a48529cb14",
    "anthropic": "bfd15aa5a4ecf63c",
    "azure-openai-key": "7f83c0b3d8ddf4ee",
    "bedrock-assume-role": "7a4c394966170013",
    "bedrock-controller-identity": "7894768f17150519",
    "bedrock-static": "47eb6db0ef876702",
    "bedrock-iam-user": "78565c5a6e7cbd6b",
    "bedrock-oidc": "dd74a00efb902e11",
    "bedrock-web-identity": "ff148e84477a0e33",
    "azure-openai": "ad3d26212e186c34",
    "azure-openai-federated": "35f2b63b57f6817a",
    "azure-openai-oidc": "8fde8809ce2dd652",
    "azure-openai-controller-identity": "09e45b634747c24f",
    "vertex-controller-identity": "b57639762118e20c",
    "vertex-key": "7ca6a05c5dc4977c",
    "vertex": "baea84d400ba7cfc",
}


def test_every_crd_default_of_a_credential_block_is_in_the_hash_defaults() -> None:
    """A default added to the CRD and not to the table would change every hash of that block
    (the API server serves it in every object): the table must follow the CRD."""
    schema = spec_schema()
    for kind, block in api.CREDENTIAL_BLOCKS.items():
        declared = leaves(crd_defaults(schema["properties"][block]))
        table = leaves(api.CREDENTIAL_DEFAULTS[block])
        missing = {p: v for p, v in declared.items() if table.get(p, object()) != v}
        assert missing == {}, f"{kind}: CRD defaults not in api.CREDENTIAL_DEFAULTS"


def test_a_default_never_changes_value_under_the_earlier_form() -> None:
    """The earlier form is rebuilt from today's meaning with the defaults of its time: that is
    only right while each of those defaults still means the same value."""
    for block, frozen in spechash._DEFAULTED_V1.items():
        today = leaves(api.CREDENTIAL_DEFAULTS[block])
        changed = {p: v for p, v in leaves(frozen).items() if today.get(p) != v}
        assert changed == {}, block


DEFAULTS_ADDED_SINCE_B786434: dict[str, dict[Any, Any]] = {}
"""Defaults today's CRD has that b786434's did not, by block and field path, each one a value
that the field's absence meant at b786434 too (so a hash b786434 recorded for an object without
the field still reads as the same spec). Empty while the CRD has the defaults it had then."""


def test_a_default_added_since_b786434_is_one_its_absence_meant_then() -> None:
    """The earlier form is rebuilt from today's meaning, so a default today's CRD added to a
    field b786434 left undefaulted is taken to mean what that field's absence meant then. True
    only if someone checked: a new default must be listed above, with that reason, or this
    fails (found by review)."""
    for block, today in api.CREDENTIAL_DEFAULTS.items():
        frozen = leaves(spechash._DEFAULTED_V1.get(block, {}))
        added = {p: v for p, v in leaves(today).items() if p not in frozen}
        assert added == DEFAULTS_ADDED_SINCE_B786434.get(block, {}), block


@pytest.mark.parametrize(("name", "spec"), samples(), ids=[n for n, _ in samples()])
def test_fields_at_their_default_hash_as_if_absent(name: str, spec: api.PolicySpec) -> None:
    assert spechash.of(served(spec)) == spechash.of(spec)


@pytest.mark.parametrize(("name", "spec"), samples(), ids=[n for n, _ in samples()])
def test_what_b786434_recorded_still_reads_as_the_same_spec_and_is_kept(
    name: str, spec: api.PolicySpec
) -> None:
    """Mutation caught: ``judge`` without the earlier form (every sample with a default
    written out is CHANGED: a re-mint on upgrade)."""
    recorded = RECORDED_AT_B786434[name]
    assert spechash.judge(recorded, served(spec)) is Verdict.CURRENT
    assert spechash.to_record(recorded, served(spec)) == recorded, "not rewritten to migrate it"


def test_a_crd_that_gains_a_default_changes_no_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new optional field, with a default the API server now serves in every object: neither
    today's form nor what b786434 recorded changes."""
    spec = served(dict(samples())["bedrock-web-identity"])
    before = spechash.of(spec)
    defaults = copy.deepcopy(api.CREDENTIAL_DEFAULTS)
    defaults["awsCredentials"]["serviceAccountToken"]["sessionTags"] = "none"
    monkeypatch.setattr(api, "CREDENTIAL_DEFAULTS", defaults)
    gained: dict[str, Any] = copy.deepcopy(dict(spec))
    gained["awsCredentials"]["serviceAccountToken"]["sessionTags"] = "none"
    now = cast(api.PolicySpec, gained)
    assert spechash.of(now) == before
    assert spechash.judge(RECORDED_AT_B786434["bedrock-web-identity"], now) is Verdict.CURRENT
    gained["awsCredentials"]["serviceAccountToken"]["sessionTags"] = "some"
    assert spechash.judge(before, now) is Verdict.CHANGED, "set to another value: a change"


def test_a_changed_credential_spec_is_changed_in_either_form() -> None:
    spec = served(dict(samples())["bedrock-web-identity"])
    today = spechash.of(spec)
    edited: dict[str, Any] = copy.deepcopy(dict(spec))
    edited["awsCredentials"]["serviceAccountToken"]["sessionDuration"] = "2h"
    for recorded in (today, RECORDED_AT_B786434["bedrock-web-identity"]):
        assert spechash.judge(recorded, cast(api.PolicySpec, edited)) is Verdict.CHANGED
    assert spechash.to_record(today, cast(api.PolicySpec, edited)) == spechash.of(
        cast(api.PolicySpec, edited)
    )
    assert spechash.judge(None, spec) is Verdict.CHANGED, "not recorded: nothing vouches"


def test_targetrefs_and_rotation_are_not_what_the_credential_is() -> None:
    spec = served(dict(samples())["bedrock-web-identity"])
    other: dict[str, Any] = copy.deepcopy(dict(spec))
    other["targetRefs"] = [{"name": "elsewhere"}]
    other["rotation"] = {"renewBefore": "10m"}
    assert spechash.of(cast(api.PolicySpec, other)) == spechash.of(spec)


@pytest.mark.parametrize("kind", ["APIKey", "AWSCredentials", "GCPCredentials"])
def test_the_block_null_form_of_1f52da0_is_untrusted(kind: str) -> None:
    """1f52da0 named the block ``kind[0].lower() + kind[1:]`` (``aWSCredentials``), which no
    spec has: its hash is the same for every policy of the type."""
    block = kind[0].lower() + kind[1:]
    text = json.dumps({"type": kind, "block": None}, sort_keys=True)
    recorded = hashlib.sha256(text.encode()).hexdigest()[:16]
    for name, spec in samples():
        if spec["type"] == kind:
            assert block not in spec
            assert spechash.judge(recorded, served(spec)) is Verdict.UNTRUSTED, name
            assert spechash.to_record(recorded, served(spec)) == spechash.of(spec)
