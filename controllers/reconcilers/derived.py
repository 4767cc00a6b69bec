"""The derived credentials Secret: built from a credential, and read back into one.

Reading back is what makes rotation restart-proof: everything needed to decide whether the
served credential is still right (when it was issued and expires, which spec and which rotation
request it answers, the provider's state) is on the Secret, in the cache.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from controllers.reconcilers import api
from controllers.runtime import clock as clocks
from controllers.runtime import objects
from rotator.credentials import Credential, content_hash


@dataclass(frozen=True)
class Served:
    """The credential in the derived Secret, and what it was minted for."""

    credential: Credential
    intact: bool
    """Its data still matches its hash (nobody edited it)."""
    spec_hash: str | None
    answered_request: str | None


def spec_hash(spec: api.PolicySpec) -> str:
    """Hash of what the credential depends on: the type and its block (not targetRefs)."""
    kind = spec["type"]
    block_name = kind[0].lower() + kind[1:]
    block = cast(Mapping[str, Any], spec).get(block_name)
    text = json.dumps({"type": kind, "block": block}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build(
    policy: api.Policy,
    credential: Credential,
    *,
    minted: bool,
    answered_request: str | None = None,
) -> dict[str, Any]:
    """The derived Secret (DESIGN §3): name, labels, annotations, owner, data."""
    annotations = {api.CREDENTIAL_HASH_ANNOTATION: credential.content_hash}
    if credential.expires_at is not None:
        annotations[api.EXPIRATION_ANNOTATION] = clocks.rfc3339(credential.expires_at)
    if minted:
        if credential.issued_at is not None:
            annotations[api.ISSUED_AT_ANNOTATION] = clocks.rfc3339(credential.issued_at)
        annotations[api.SPEC_HASH_ANNOTATION] = spec_hash(policy["spec"])
        if answered_request:
            annotations[api.ANSWERED_REQUEST_ANNOTATION] = answered_request
        for key, value in credential.state.items():
            annotations[api.STATE_ANNOTATION_PREFIX + key] = value
    md = objects.meta(policy)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": api.derived_secret_name(md["name"]),
            "namespace": md["namespace"],
            "labels": {api.MANAGED_BY_LABEL: api.MANAGED_BY, "rotator.dev/policy": md["name"]},
            "annotations": annotations,
            "ownerReferences": [owner_reference(policy, "BackendSecurityPolicy")],
        },
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in credential.data.items()},
    }


def read(secret: Mapping[str, Any] | None) -> Served | None:
    if secret is None:
        return None
    annotations = objects.meta(secret).get("annotations") or {}
    try:
        data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        expires = annotations.get(api.EXPIRATION_ANNOTATION)
        issued = annotations.get(api.ISSUED_AT_ANNOTATION)
        credential = Credential(
            data,
            expires_at=clocks.parse_rfc3339(expires) if expires else None,
            issued_at=clocks.parse_rfc3339(issued) if issued else None,
            state={
                k.removeprefix(api.STATE_ANNOTATION_PREFIX): v
                for k, v in annotations.items()
                if k.startswith(api.STATE_ANNOTATION_PREFIX)
            },
        )
    except ValueError:
        return None  # unreadable: treated as missing, and replaced
    return Served(
        credential,
        intact=annotations.get(api.CREDENTIAL_HASH_ANNOTATION) == content_hash(data),
        spec_hash=annotations.get(api.SPEC_HASH_ANNOTATION),
        answered_request=annotations.get(api.ANSWERED_REQUEST_ANNOTATION),
    )


def owner_reference(owner: Mapping[str, Any], kind: str) -> objects.OwnerReference:
    md = objects.meta(owner)
    return {
        "apiVersion": api.API_VERSION,
        "kind": kind,
        "name": md["name"],
        "uid": md["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
