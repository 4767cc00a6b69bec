"""The ``rotator.dev/spec-hash`` annotation: which credential spec a derived Secret was minted (or
copied) for, and whether a value recorded by this or an earlier version can be trusted.

Why it hashes meaning, not text: the API server writes the CRD's defaults into every object it
serves, so a hash over the block as read changes the day a CRD gains a default (or a field is
added and left at its default), and every minted credential would be minted again by the
upgrade that applied it. Today's form leaves out every field at the value its absence means
(:data:`api.CREDENTIAL_DEFAULTS`).

Why earlier forms are still read: rotator up to b786434 hashed the block as its CRD defaulted
it. Such a value still says exactly what the credential was minted for (:data:`_DEFAULTED_V1`
rebuilds that block from today's), so it is trusted and kept as it is — rewriting a Secret only
to migrate its annotation would be an upgrade's write for nothing. It is replaced with today's
form when the Secret is written anyway (a rotation, a new copy).

Why one form is not trusted: rotator before 0d4801b named the block ``kind[0].lower() +
kind[1:]`` (``aWSCredentials``), so an APIKey, AWS or GCP policy hashed ``{"block": null}``
whatever its spec. That value says nothing about what was minted: the credential is minted
again, once, and the reconciler says so (:data:`api.REASON_UNTRUSTED_SPEC_HASH`).
"""

from __future__ import annotations

import copy
import enum
import hashlib
import json
from collections.abc import Mapping
from typing import Any, cast

from controllers.reconcilers import api


class Verdict(enum.Enum):
    """What a recorded ``spec-hash`` says about the spec as it is now."""

    CURRENT = "current"
    """Recorded for this spec's meaning, in today's form or an earlier one that reads so."""
    CHANGED = "changed"
    """Recorded for another spec, or not recorded at all: the credential is for something else."""
    UNTRUSTED = "untrusted"
    """Recorded in a form that cannot say what the credential was minted for."""


_DEFAULTED_V1: dict[str, dict[str, Any]] = {
    "apiKey": {"secretRef": {"key": "apiKey"}, "header": "Authorization"},
    "awsCredentials": {
        "credentialsFile": {"secretRef": {"key": "credentials"}, "profile": "default"},
        "oidcExchangeToken": {
            "oidc": {"clientSecretRef": {"key": "client-secret"}},
            "sessionDuration": "1h",
        },
        "serviceAccountToken": {"audience": "sts.amazonaws.com", "sessionDuration": "1h"},
        "iamAccessKey": {"secretRef": {"key": "credentials"}, "rotationInterval": "24h"},
        "assumeRole": {"sessionDuration": "1h"},
    },
    "gcpCredentials": {
        "credentialsFile": {"secretRef": {"key": "service_account.json"}},
        "workloadIdentityFederation": {
            "oidcExchangeToken": {"oidc": {"clientSecretRef": {"key": "client-secret"}}}
        },
    },
    "azureCredentials": {
        "scope": "https://cognitiveservices.azure.com/.default",
        "clientSecretRef": {"key": "client-secret"},
        "oidcExchangeToken": {"oidc": {"clientSecretRef": {"key": "client-secret"}}},
        "serviceAccountToken": {"audience": "api://AzureADTokenExchange"},
    },
}
"""The defaults of the CRD of rotator up to b786434, which its hashes include. Frozen: it is what
those recorded values were computed over, whatever today's CRD defaults."""


def of(spec: api.PolicySpec) -> str:
    """Today's form: the type and its credential block, each field at its default left out
    (``targetRefs`` and ``rotation`` are not what the credential is)."""
    kind, name, block = _block(spec)
    return _digest(kind, without_defaults(block, api.CREDENTIAL_DEFAULTS.get(name, {})))


def judge(recorded: str | None, spec: api.PolicySpec) -> Verdict:
    """What ``recorded`` (the annotation's value, None if absent) says about ``spec``."""
    if recorded is None:
        return Verdict.CHANGED
    if recorded == of(spec) or recorded == _earlier_form(spec):
        return Verdict.CURRENT
    kind, _, _ = _block(spec)
    if recorded == _digest(kind, None):
        return Verdict.UNTRUSTED
    return Verdict.CHANGED


def to_record(recorded: str | None, spec: api.PolicySpec) -> str:
    """The value to write on a derived Secret whose data is not changing: ``recorded`` while it
    still reads as this spec (not rewritten to migrate it), else today's form."""
    if recorded is not None and judge(recorded, spec) is Verdict.CURRENT:
        return recorded
    return of(spec)


def _earlier_form(spec: api.PolicySpec) -> str:
    """What rotator up to b786434 recorded for this spec: the block as its CRD defaulted it."""
    kind, name, block = _block(spec)
    meaning = without_defaults(block, api.CREDENTIAL_DEFAULTS.get(name, {}))
    return _digest(kind, with_defaults(meaning, _DEFAULTED_V1.get(name, {})))


def _block(spec: api.PolicySpec) -> tuple[str, str, Any]:
    kind = spec["type"]
    name = api.CREDENTIAL_BLOCKS.get(kind, "")
    return kind, name, cast(Mapping[str, Any], spec).get(name)


def _digest(kind: str, block: Any) -> str:
    text = json.dumps({"type": kind, "block": block}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def without_defaults(value: Any, defaults: Mapping[str, Any]) -> Any:
    """``value`` with every field equal to its default removed, in nested objects too. An object
    field is kept even when nothing is left of it: its presence can be the choice
    (``controllerIdentity: {}``)."""
    if not isinstance(value, Mapping):
        return value
    out: dict[str, Any] = {}
    for key, field in value.items():
        default = defaults.get(key, _NO_DEFAULT)
        if isinstance(default, Mapping):
            out[key] = without_defaults(field, default)
        elif field != default:
            out[key] = field
    return out


def with_defaults(value: Any, defaults: Mapping[str, Any]) -> Any:
    """``value`` as the API server defaults it: each absent field set to its default, and the
    fields of each object present defaulted in turn (an absent object is not created)."""
    if not isinstance(value, Mapping):
        return value
    out = dict(value)
    for key, default in defaults.items():
        if isinstance(default, Mapping):
            if key in out:
                out[key] = with_defaults(out[key], default)
        elif key not in out:
            out[key] = copy.deepcopy(default)
    return out


_NO_DEFAULT = object()
