"""The refresh decision on its own (controllers/reconcilers/policy/decide.py): each named check,
the order of the chain, which reasons force a new credential, and when a copy is current — from
plain values, no API, no reconciler."""

from __future__ import annotations

from typing import Any, cast

import pytest

from controllers.reconcilers import api, derived
from controllers.reconcilers.credentialsources import (
    CredentialSource,
    SourceContext,
    controller_identity_refusal,
)
from controllers.reconcilers.policy import decide
from controllers.reconcilers.policy.decide import Inputs, RefreshReason
from rotator.credentials import Credential

NOW = 1_700_000_000.0
FRESH = Credential({"k": b"v"}, issued_at=NOW - 10, expires_at=NOW + 3590)
DUE = Credential({"k": b"v"}, issued_at=NOW - 3000, expires_at=NOW + 600)


class Minting(CredentialSource):
    def calls_provider(self, spec: api.PolicySpec) -> bool:
        return True


class Copying(CredentialSource):
    def secret_refs(self, spec: api.PolicySpec) -> list[api.SecretRef]:
        return [spec["apiKey"]["secretRef"]]


def policy(spec: dict[str, Any], **annotations: str) -> api.Policy:
    return cast(
        api.Policy,
        {
            "apiVersion": api.API_VERSION,
            "kind": "BackendSecurityPolicy",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "annotations": annotations},
            "spec": spec,
        },
    )


AWS = {"type": "AWSCredentials", "awsCredentials": {"region": "us-east-1"}}
KEY = {"type": "APIKey", "apiKey": {"secretRef": {"name": "key", "key": "apiKey"}}}


def served(p: api.Policy, credential: Credential, **annotations: str) -> derived.Served:
    secret = derived.build(p, credential, minted=True)
    secret["metadata"]["annotations"].update(annotations)
    read = derived.read(secret)
    assert read is not None
    return read


def inputs(
    p: api.Policy, current: derived.Served | None, source: CredentialSource | None = None, **kw: Any
) -> Inputs:
    ctx = SourceContext(p, lambda _: None, now=NOW, current=current.credential if current else None)
    return Inputs(p, current, source or Minting(), ctx, **kw)


def reason(check: decide.Check, i: Inputs) -> RefreshReason | None:
    decision = check(i)
    return None if decision is None else decision.reason


def test_each_check_speaks_only_of_its_own_reason() -> None:
    p = policy(AWS)
    fresh = served(p, FRESH)
    for check in decide.MINTED_CHECKS:
        assert check(inputs(p, fresh)) is None, f"{check.__name__} on a fresh, intact credential"
    assert reason(decide.missing, inputs(p, None)) is RefreshReason.MISSING
    edited = served(p, FRESH, **{api.ISSUED_AT_ANNOTATION: "yesterday"})
    assert reason(decide.edited, inputs(p, edited)) is RefreshReason.EDITED
    changed = policy({**AWS, "awsCredentials": {"region": "eu-west-1"}})
    assert reason(decide.spec_changed, inputs(changed, fresh)) is RefreshReason.SPEC_CHANGED
    asked = policy(AWS, **{api.ROTATE_REQUESTED_ANNOTATION: "now"})
    assert reason(decide.rotation_requested, inputs(asked, fresh)) is (
        RefreshReason.ROTATION_REQUESTED
    )
    answered = served(asked, FRESH, **{api.ANSWERED_REQUEST_ANNOTATION: "now"})
    assert reason(decide.rotation_requested, inputs(asked, answered)) is None
    assert reason(decide.due, inputs(p, served(p, DUE))) is RefreshReason.DUE


def test_the_first_check_that_speaks_wins() -> None:
    """Edited, spec changed and due at once: edited (the order of MINTED_CHECKS)."""
    p = policy({**AWS, "awsCredentials": {"region": "eu-west-1"}})
    tampered = served(policy(AWS), DUE, **{api.ISSUED_AT_ANNOTATION: "yesterday"})
    assert decide.decide(inputs(p, tampered)).reason is RefreshReason.EDITED
    assert decide.decide(inputs(p, tampered), checks=(decide.due,)).reason is RefreshReason.DUE


def test_a_controller_identity_no_longer_allowed_makes_a_fresh_credential_due_at_once() -> None:
    p = policy(AWS)
    refusal = controller_identity_refusal(frozenset(), "ns")
    decision = decide.decide(inputs(p, served(p, FRESH), refusal=refusal))
    assert decision.reason is RefreshReason.CONTROLLER_IDENTITY_NOT_ALLOWED
    assert "--controller-identity-namespaces" in decision.message
    assert decide.decide(inputs(p, None, refusal=refusal)).reason is RefreshReason.MISSING
    assert decide.decide(inputs(p, served(p, FRESH))) == decide.KEEP


@pytest.mark.parametrize(
    ("reason", "forced"),
    [
        (RefreshReason.MISSING, True),
        (RefreshReason.EDITED, True),
        (RefreshReason.SPEC_CHANGED, True),
        (RefreshReason.UNTRUSTED_SPEC_HASH, True),
        (RefreshReason.ROTATION_REQUESTED, True),
        (RefreshReason.CONTROLLER_IDENTITY_NOT_ALLOWED, False),
        (RefreshReason.DUE, False),
        (RefreshReason.COPY, False),
    ],
)
def test_only_reasons_before_their_time_force_a_new_credential(
    reason: RefreshReason, forced: bool
) -> None:
    assert reason.forced is forced
    assert reason.mints is (reason is not RefreshReason.COPY)


def copied(p: api.Policy, version: str | None) -> derived.Served:
    secret = derived.build(p, Credential({"apiKey": b"sk"}), minted=False, copied_from=version)
    read = derived.read(secret)
    assert read is not None
    return read


def test_a_copy_is_kept_only_while_the_cache_shows_the_versions_it_was_copied_from() -> None:
    p = policy(KEY)
    at = {"key": "7"}.get
    assert decide.decide(inputs(p, copied(p, "7"), Copying(), cached_version=at)) == decide.KEEP
    assert decide.decide(inputs(p, copied(p, "uid/7"), Copying(), cached_version=at)) == (
        decide.KEEP
    ), "a version recorded with its uid, before the upgrade"
    for recorded, cache in (("6", at), ("7", {}.get), (None, at)):
        decision = decide.decide(inputs(p, copied(p, recorded), Copying(), cached_version=cache))
        assert decision.reason is RefreshReason.COPY, (recorded, cache)
    assert decide.decide(inputs(p, None, Copying(), cached_version=at)).reason is (
        RefreshReason.COPY
    )


def test_the_due_time_is_in_whole_seconds_rounded_down() -> None:
    class Due(Minting):
        def due_at(self, ctx: SourceContext) -> float | None:
            return NOW + 0.9

    p = policy(AWS)
    assert decide.due_at(Due(), SourceContext(p, lambda _: None)) == NOW
    assert decide.due_at(Copying(), SourceContext(p, lambda _: None)) is None
