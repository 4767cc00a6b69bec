"""The policy reconciler on bad state: the expiry metric survives a failing refresh, annotations
that no longer parse are reported and repaired instead of raising on every reconcile. Run against
in-memory caches fed by an in-memory API server (tests/support/memapi.py) and a scripted
credential source."""

from __future__ import annotations

from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from controllers.reconcilers import api, derived
from controllers.reconcilers.credentialsources import CredentialSource, SourceContext
from controllers.reconcilers.metrics import CredentialMetrics
from controllers.runtime import clock as clocks
from controllers.runtime import objects
from controllers.runtime.reconcile import Request
from rotator import errors
from rotator.credentials import Credential
from rotator.providers.aws import iam
from tests.support import policyworld

NS = "ns"
NOW = 1_700_000_000.0
RETIRE = api.STATE_ANNOTATION_PREFIX + iam.RETIRE_AT
PREVIOUS = api.STATE_ANNOTATION_PREFIX + iam.PREVIOUS_KEY


class ScriptedSource(CredentialSource):
    """Mints the given credential, or raises the given error; remembers what it was asked."""

    def __init__(self) -> None:
        self.outcome: Credential | errors.CredentialError = errors.ProviderUnavailable("STS down")
        self.asked: list[SourceContext] = []

    def calls_provider(self, spec: api.PolicySpec) -> bool:
        return True

    def obtain(self, ctx: SourceContext) -> Credential:
        self.asked.append(ctx)
        if isinstance(self.outcome, errors.CredentialError):
            raise self.outcome
        return self.outcome


class World:
    """Policy ``p`` and its derived Secret on the in-memory API server, whose caches (the
    managed-Secret view, as the controller's) it feeds; the policy reconciler over them."""

    def __init__(self) -> None:
        self.source = ScriptedSource()
        world = policyworld.policy_world(
            NS,
            {"type": "AWSCredentials", "awsCredentials": {"region": "us-east-1"}},
            {"AWSCredentials": self.source},
            clock=clocks.FakeClock(NOW),
        )
        self.api, self.events, self.registry = world.api, world.events, world.registry
        self.policies, self.managed = world.policies, world.managed
        self.policy, self.reconciler = world.policy, world.reconciler

    def serve(self, credential: Credential, **annotations: str) -> None:
        """The derived Secret as a previous run applied it, with ``annotations`` edited in."""
        secret = derived.build(cast(api.Policy, self.policy), credential, minted=True)
        secret["metadata"]["annotations"].update(annotations)
        self.api.put(objects.SECRETS, secret, field_manager=api.FIELD_MANAGER)

    def hand_edit(self, **annotations: str) -> None:
        """Someone else sets ``annotations`` on the derived Secret (they own them)."""
        secret = self.api.stored(objects.SECRETS, NS, api.derived_secret_name("p"))
        assert secret is not None
        secret["metadata"]["annotations"].update(annotations)
        self.api.put(objects.SECRETS, secret)

    def reconcile(self) -> float | None:
        try:
            return self.reconciler.reconcile(Request(NS, "p")).requeue_after
        finally:
            self.api.sync()  # the informers bring back what it wrote

    def secret_writes(self) -> list[Any]:
        """The derived Secret's writes (applies and patches), as sent."""
        return [w.body for w in self.api.writes_to(objects.SECRETS)]

    def metric(self, name: str) -> float | None:
        labels = {"namespace": NS, "name": "p", "type": "AWSCredentials"}
        return self.registry.get_sample_value(name, labels)

    def ready(self) -> dict[str, Any]:
        return next(c for c in self.status()["conditions"] if c["type"] == "Ready")

    def status(self) -> dict[str, Any]:
        """The last status written."""
        return self.api.writes_to(api.POLICIES, subresource="status")[-1].status


def session(issued: float, expires: float, key: bytes = b"k1") -> Credential:
    return Credential({"credentials": key}, expires_at=expires, issued_at=issued)


@pytest.fixture
def world() -> World:
    return World()


def test_the_expiry_metric_is_exported_when_the_first_refresh_after_a_restart_fails(
    world: World,
) -> None:
    world.serve(session(NOW - 50, NOW + 10))  # due: a fresh process must refresh at once
    delay = world.reconcile()
    assert world.source.asked, "a refresh was attempted"
    assert (world.ready()["status"], world.ready()["reason"]) == ("True", "RotationFailed")
    assert world.metric("rotator_credential_expiration_timestamp_seconds") == NOW + 10
    assert delay is not None
    assert world.metric("rotator_credential_renewal_timestamp_seconds") == NOW + delay


def test_a_malformed_state_time_is_reported_dropped_and_rewritten(world: World) -> None:
    world.serve(
        Credential({"credentials": b"k1"}, issued_at=NOW - 10),
        **{PREVIOUS: "AKIAPREVIOUS", RETIRE: "next tuesday"},
    )
    world.source.outcome = Credential({"credentials": b"k2"}, issued_at=NOW, state={})
    world.reconcile()  # no exception
    (ctx,) = world.source.asked
    assert ctx.forced, "an edited Secret is replaced, as when its data is edited"
    assert ctx.current is not None
    assert dict(ctx.current.state) == {iam.PREVIOUS_KEY: "AKIAPREVIOUS"}, "the bad time is absent"
    assert iam.retire_due(ctx.current) == 0.0, "with no known grace left, the key retires now"
    (warning,) = [e for e in world.events.events if e[1] == "MalformedAnnotation"]
    assert warning[0] == "Warning"
    assert RETIRE in warning[2]
    assert "next tuesday" not in warning[2]
    (written,) = world.secret_writes()
    assert RETIRE not in written["metadata"]["annotations"]
    assert world.ready()["reason"] == "CredentialsReady"


def test_an_unreadable_expiry_counts_as_past(world: World) -> None:
    world.serve(session(NOW - 10, NOW + 3000), **{api.EXPIRATION_ANNOTATION: "soon"})
    world.reconcile()
    assert world.source.asked[0].forced
    ready = world.ready()
    assert (ready["status"], ready["reason"]) == ("False", "Expired"), "nothing vouches for it"
    assert world.metric("rotator_credential_expiration_timestamp_seconds") == 0.0
    assert ("Warning", "MalformedAnnotation") in {(t, r) for t, r, _ in world.events.events}


def test_a_hand_set_annotation_an_apply_cannot_remove_is_removed_by_a_merge_patch(
    world: World,
) -> None:
    world.serve(session(NOW - 10, NOW + 3000))
    world.hand_edit(**{RETIRE: "garbage"})  # owned by the editor: survives the apply
    world.source.outcome = session(NOW, NOW + 3600, b"k2")
    world.reconcile()
    apply, removal = world.secret_writes()
    assert RETIRE not in apply["metadata"]["annotations"]
    assert removal["metadata"].pop("resourceVersion"), "on the version the apply wrote"
    assert removal == {"metadata": {"annotations": {RETIRE: None}}}
    stored = world.api.stored(objects.SECRETS, NS, api.derived_secret_name("p"))
    assert stored is not None
    assert RETIRE not in stored["metadata"]["annotations"]


def test_nothing_extra_is_written_when_the_apply_removed_everything(world: World) -> None:
    world.serve(session(NOW - 10, NOW + 3000), **{RETIRE: "garbage"})
    world.source.outcome = session(NOW, NOW + 3600, b"k2")
    world.reconcile()
    assert len(world.secret_writes()) == 1


def test_retire_due_never_raises_on_edited_state() -> None:
    def cred(**state: str) -> Credential:
        return Credential({}, state=state)

    assert iam.retire_due(None) is None
    assert iam.retire_due(cred()) is None
    assert iam.retire_due(cred(**{iam.PREVIOUS_KEY: "A", iam.RETIRE_AT: "12.5"})) == 13.0, (
        "whole seconds, never before the grace period ends"
    )
    for bad in ("", "soon", "nan", "inf"):
        assert iam.retire_due(cred(**{iam.PREVIOUS_KEY: "A", iam.RETIRE_AT: bad})) == 0.0
    assert iam.retire_due(cred(**{iam.PREVIOUS_KEY: "A"})) == 0.0


def test_read_names_every_annotation_that_does_not_parse() -> None:
    policy = World().policy
    secret = derived.build(
        cast(api.Policy, policy),
        Credential({"k": b"v"}, expires_at=NOW, issued_at=NOW - 1, state={"x-at": "5", "y": "z"}),
        minted=True,
    )
    clean = derived.read(secret)
    assert clean is not None
    assert clean.malformed == ()
    assert (clean.credential.expires_at, clean.credential.issued_at) == (NOW, NOW - 1)
    assert dict(clean.credential.state) == {"x-at": "5", "y": "z"}

    secret["metadata"]["annotations"].update(
        {
            api.EXPIRATION_ANNOTATION: "",
            api.ISSUED_AT_ANNOTATION: "yesterday",
            api.STATE_ANNOTATION_PREFIX + "x-at": "1e999",
            api.STATE_ANNOTATION_PREFIX + "y": "not a time, and need not be",
        }
    )
    edited = derived.read(secret)
    assert edited is not None
    assert edited.intact, "the data is untouched"
    assert edited.malformed == tuple(
        sorted(
            [
                api.EXPIRATION_ANNOTATION,
                api.ISSUED_AT_ANNOTATION,
                api.STATE_ANNOTATION_PREFIX + "x-at",
            ]
        )
    )
    assert edited.credential.expires_at == derived.UNREADABLE_EXPIRY
    assert edited.credential.issued_at is None
    assert dict(edited.credential.state) == {"y": "not a time, and need not be"}


def test_a_policy_without_series_keeps_no_labels() -> None:
    """An API key never expires and is never refreshed: no series, and nothing kept for it (0.25
    KB a policy). Mutation caught: labels recorded for every policy served."""
    metrics = CredentialMetrics(CollectorRegistry())
    metrics.observed(Request("ns", "p"), "APIKey", expires_at=None)
    metrics.served(Request("ns", "p"), "APIKey", expires_at=None, renews_at=None)
    assert metrics._labels == {}
    metrics.served(Request("ns", "q"), "AWSCredentials", expires_at=2.0, renews_at=1.0)
    metrics.observed(Request("ns", "q"), "AWSCredentials", expires_at=None)
    assert metrics.renewal.labels("ns", "q", "AWSCredentials")._value.get() == 1.0
    metrics.served(Request("ns", "q"), "AWSCredentials", expires_at=None, renews_at=None)
    assert metrics._labels == {}
