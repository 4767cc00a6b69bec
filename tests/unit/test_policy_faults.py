"""The policy reconciler on bad state: the expiry metric survives a failing refresh, annotations
that no longer parse are reported and repaired instead of raising on every reconcile. Run against
in-memory stores, a recording API and a scripted credential source."""

from __future__ import annotations

from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from controllers.reconcilers import api, derived, echoes
from controllers.reconcilers.credentialsources import CredentialSource, SourceContext
from controllers.reconcilers.metrics import CredentialMetrics
from controllers.reconcilers.policy import PolicyReconciler
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import events, objects
from controllers.runtime.cache import FullObjectReader
from controllers.runtime.reconcile import Request
from controllers.runtime.store import Store
from rotator import errors
from rotator.credentials import Credential
from rotator.providers.aws import iam

NS = "ns"
NOW = 1_700_000_000.0
RETIRE = api.STATE_ANNOTATION_PREFIX + iam.RETIRE_AT
PREVIOUS = api.STATE_ANNOTATION_PREFIX + iam.PREVIOUS_KEY


class RecordingAPI:
    def __init__(self) -> None:
        self.patches: list[tuple[str, str, Any, str]] = []
        self.extra_annotations: dict[str, str] = {}
        """Annotations the server keeps on a written Secret (owned by another field manager)."""

    def patch(self, resource: objects.Resource, name: str, body: Any, **kw: Any) -> dict[str, Any]:
        self.patches.append((resource.plural, name, body, str(kw.get("patch_type", ""))))
        if resource != objects.SECRETS or "data" not in body:
            return cast(dict[str, Any], body)
        md = body["metadata"]
        annotations = {**self.extra_annotations, **md.get("annotations", {})}
        return {**body, "metadata": {**md, "annotations": annotations, "resourceVersion": "2"}}

    def secret_writes(self) -> list[Any]:
        return [b for plural, _, b, _ in self.patches if plural == "secrets"]

    def status(self) -> dict[str, Any]:
        return cast(
            dict[str, Any],
            [b for plural, _, b, _ in self.patches if plural == "backendsecuritypolicies"][-1][
                "status"
            ],
        )


class Events:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: Any, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))


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
    def __init__(self) -> None:
        self.api = RecordingAPI()
        self.events = Events()
        self.registry = CollectorRegistry()
        self.source = ScriptedSource()
        self.policies, self.managed = Store(), Store()
        self.policy: dict[str, Any] = {
            "apiVersion": api.API_VERSION,
            "kind": "BackendSecurityPolicy",
            "metadata": {"name": "p", "namespace": NS, "uid": "u", "generation": 1},
            "spec": {"type": "AWSCredentials", "awsCredentials": {"region": "us-east-1"}},
        }
        self.policies.upsert(self.policy)
        self.reconciler = PolicyReconciler(
            api_client=cast(clients.Client, self.api),
            policies=self.policies,
            managed_secrets=self.managed,
            secrets=cast(FullObjectReader, None),
            secret_versions=Store(),
            sources={"AWSCredentials": self.source},
            recorder=cast(events.EventRecorder, self.events),
            metrics=CredentialMetrics(self.registry),
            own_writes=echoes.OwnWrites(),
            clock=clocks.FakeClock(NOW),
        )

    def serve(self, credential: Credential, **annotations: str) -> None:
        """The derived Secret as a previous run wrote it, with ``annotations`` edited in."""
        secret = derived.build(cast(api.Policy, self.policy), credential, minted=True)
        secret["metadata"]["annotations"].update(annotations)
        secret["metadata"]["resourceVersion"] = "1"
        self.managed.upsert(secret)

    def reconcile(self) -> float | None:
        return self.reconciler.reconcile(Request(NS, "p")).requeue_after

    def metric(self, name: str) -> float | None:
        labels = {"namespace": NS, "name": "p", "type": "AWSCredentials"}
        return self.registry.get_sample_value(name, labels)

    def ready(self) -> dict[str, Any]:
        return next(c for c in self.status()["conditions"] if c["type"] == "Ready")

    def status(self) -> dict[str, Any]:
        return self.api.status()


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
    (written,) = world.api.secret_writes()
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
    world.serve(session(NOW - 10, NOW + 3000), **{RETIRE: "garbage"})
    world.api.extra_annotations = {RETIRE: "garbage"}  # owned by the editor: survives the apply
    world.source.outcome = session(NOW, NOW + 3600, b"k2")
    world.reconcile()
    apply, removal = world.api.secret_writes()
    assert RETIRE not in apply["metadata"]["annotations"]
    assert removal == {"metadata": {"resourceVersion": "2", "annotations": {RETIRE: None}}}


def test_nothing_extra_is_written_when_the_apply_removed_everything(world: World) -> None:
    world.serve(session(NOW - 10, NOW + 3000), **{RETIRE: "garbage"})
    world.source.outcome = session(NOW, NOW + 3600, b"k2")
    world.reconcile()
    assert len(world.api.secret_writes()) == 1


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
