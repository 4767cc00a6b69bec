"""The derived credentials Secret: built from a credential, and read back into one.

Reading back is what makes rotation restart-proof: everything needed to decide whether the
served credential is still right (when it was issued and expires, which spec and which rotation
request it answers, the provider's state) is on the Secret, in the cache.
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controllers.reconcilers import api, spechash
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
    malformed: tuple[str, ...] = ()
    """Annotations that did not parse (edited by hand): ignored, and reason to rewrite the
    Secret."""
    source_version: str | None = None
    """For a copied credential, the versions of the Secrets it was copied from
    (:func:`source_version`); None when not recorded."""


class Change(enum.Enum):
    """What a reconcile did to the derived Secret."""

    NONE = "none"
    CREATED = "created"
    ROTATED = "rotated"
    REPAIRED = "repaired"


def key(policy: api.Policy) -> objects.ObjectKey:
    """The derived Secret's key: beside its policy, named for it."""
    md = policy["metadata"]
    return objects.make_key(md["namespace"], api.derived_secret_name(md["name"]))


UNREADABLE_EXPIRY = 0.0
"""The expiry of a credential whose expiry annotation does not parse: long past."""


def spec_hash(spec: api.PolicySpec) -> str:
    """Hash of what the credential depends on: the type and its block (not targetRefs), each
    field at its default left out (:mod:`.spechash`, which also reads earlier forms)."""
    return spechash.of(spec)


def keep_recorded_spec_hash(
    desired: dict[str, Any], known: Mapping[str, Any], spec: api.PolicySpec
) -> None:
    """Puts the ``spec-hash`` that ``known`` records on ``desired`` (built for ``spec``) when it
    still reads as that spec in an earlier form (:func:`spechash.to_record`): a Secret whose
    data is not changing is not rewritten only to migrate that annotation."""
    recorded = (objects.meta(known).get("annotations") or {}).get(api.SPEC_HASH_ANNOTATION)
    annotations = desired["metadata"]["annotations"]
    if recorded is not None and recorded != annotations[api.SPEC_HASH_ANNOTATION]:
        annotations[api.SPEC_HASH_ANNOTATION] = spechash.to_record(recorded, spec)


def source_version(versions: Iterable[str]) -> str:
    """The ``rotator.dev/source-version`` value for the resourceVersion of each source Secret, in
    the order the spec names them: equal exactly when every source is at the same version.

    The resourceVersion alone suffices: the API server gives every write of every object a new
    one (a Secret deleted and created again under its name too), and the Secret's name is fixed
    by the spec, whose hash the derived Secret also records. So the all-Secrets metadata cache
    keeps no uids (85 bytes per Secret in the cluster)."""
    return ",".join(versions)


def recorded_versions(annotation: str) -> str:
    """A ``source-version`` annotation as :func:`source_version` writes it now: one written
    before (``<uid>/<resourceVersion>`` each) reads as its resourceVersions, so an upgrade reads
    no source again."""
    return ",".join(part.rsplit("/", 1)[-1] for part in annotation.split(","))


def build(
    policy: api.Policy,
    credential: Credential,
    *,
    minted: bool,
    answered_request: str | None = None,
    copied_from: str | None = None,
) -> dict[str, Any]:
    """The derived Secret (docs/api.md, "Derived credentials Secret"): name, labels,
    annotations, owner, data. ``copied_from`` is the :func:`source_version` of a copied
    credential's sources (None: not recorded, the next reconcile reads them again)."""
    annotations = {
        api.CREDENTIAL_HASH_ANNOTATION: credential.content_hash,
        api.SPEC_HASH_ANNOTATION: spec_hash(policy["spec"]),
    }
    if credential.expires_at is not None:
        annotations[api.EXPIRATION_ANNOTATION] = clocks.rfc3339(credential.expires_at)
    if not minted and copied_from:
        annotations[api.SOURCE_VERSION_ANNOTATION] = copied_from
    if minted:
        if credential.issued_at is not None:
            annotations[api.ISSUED_AT_ANNOTATION] = clocks.rfc3339(credential.issued_at)
        if answered_request:
            annotations[api.ANSWERED_REQUEST_ANNOTATION] = answered_request
        for key, value in credential.state.items():
            annotations[api.STATE_ANNOTATION_PREFIX + key] = value
    md = objects.meta(policy)
    labels, owner_annotations = api.owner_labels(api.POLICY_LABEL, md["name"])
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": api.derived_secret_name(md["name"]),
            "namespace": md["namespace"],
            "labels": {api.MANAGED_BY_LABEL: api.MANAGED_BY, **labels},
            "annotations": {**annotations, **owner_annotations},
            "ownerReferences": [owner_reference(policy, "BackendSecurityPolicy")],
        },
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in credential.data.items()},
    }


def read(secret: Mapping[str, Any] | None) -> Served | None:
    """The served credential, or None when there is none (or its data is not base64: replaced).

    Annotations are read one by one, and one that does not parse (a hand edit) is ignored and
    named in :attr:`Served.malformed`: an expiry that cannot be read counts as past (nothing
    vouches for the credential), an issue time as unknown, a state time as absent (the provider
    repairs its state). Nothing here raises on what a user can write into a Secret.
    """
    if secret is None:
        return None
    annotations = objects.meta(secret).get("annotations") or {}
    try:
        data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    except ValueError:
        return None  # unreadable: treated as missing, and replaced
    malformed: list[str] = []
    expires_at = _time(annotations, api.EXPIRATION_ANNOTATION, clocks.parse_rfc3339, malformed)
    if api.EXPIRATION_ANNOTATION in malformed:
        expires_at = UNREADABLE_EXPIRY
    state: dict[str, str] = {}
    for name, value in annotations.items():
        if not name.startswith(api.STATE_ANNOTATION_PREFIX):
            continue
        key = name.removeprefix(api.STATE_ANNOTATION_PREFIX)
        if (
            key.endswith(api.STATE_TIME_SUFFIX)
            and _time(annotations, name, float, malformed) is None
        ):
            continue
        state[key] = value
    credential = Credential(
        data,
        expires_at=expires_at,
        issued_at=_time(annotations, api.ISSUED_AT_ANNOTATION, clocks.parse_rfc3339, malformed),
        state=state,
    )
    return Served(
        credential,
        intact=annotations.get(api.CREDENTIAL_HASH_ANNOTATION) == content_hash(data),
        spec_hash=annotations.get(api.SPEC_HASH_ANNOTATION),
        answered_request=annotations.get(api.ANSWERED_REQUEST_ANNOTATION),
        malformed=tuple(sorted(malformed)),
        source_version=annotations.get(api.SOURCE_VERSION_ANNOTATION),
    )


def _time(
    annotations: Mapping[str, str],
    name: str,
    parse: Callable[[str], float],
    malformed: list[str],
) -> float | None:
    """The time in annotation ``name``; None if absent, or (noted in ``malformed``) unreadable."""
    value = annotations.get(name)
    if value is None:
        return None
    seconds = read_time(value, parse)
    if seconds is None:
        malformed.append(name)
    return seconds


def read_time(value: str, parse: Callable[[str], float] = clocks.parse_rfc3339) -> float | None:
    """The time ``value`` says (an RFC 3339 time by default); None when it does not read as one:
    the parser refuses it (ValueError), it is beyond what a float or a date holds
    (OverflowError), or it is not finite (``nan``, ``inf``). The one reader of a time annotation
    rotator wrote (``rotator.dev/expiration-time`` here and in the Route's resolution, the state
    times): one that does not read vouches for nothing."""
    return clocks.read_rfc3339(value, parse)


def stale_annotations(secret: Mapping[str, Any], desired: Mapping[str, str]) -> set[str]:
    """rotator's annotations (``rotator.dev/…``, ``state.rotator.dev/…``) on ``secret`` that the
    ``desired`` annotations no longer hold."""
    return {
        k
        for k in objects.meta(secret).get("annotations") or {}
        if (k.startswith("rotator.dev/") or k.startswith(api.STATE_ANNOTATION_PREFIX))
        and k not in desired
    }


def without_annotations(secret: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """A JSON merge patch removing ``names`` from ``secret``, if it has not changed since.

    A server-side apply removes only fields its manager owns; an annotation edited by hand has
    another owner and survives it, so a repair removes it this way.
    """
    return {
        "metadata": {
            "resourceVersion": objects.meta(secret).get("resourceVersion"),
            "annotations": dict.fromkeys(names),
        }
    }


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
