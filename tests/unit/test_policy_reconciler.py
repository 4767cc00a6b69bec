"""The policy reconciler, branch by branch, against an in-memory API server
(tests/support/memapi.py) feeding real stores with the controller's indexes, a scripted credential source and a fake clock: why a credential is
refreshed (``decide``), what a failure reports (``report.failed``), what a deletion gives back
(``release``), and how a non-idempotent mint (an IAM key) is protected from a stale cache and
undone when it cannot be served. No network, no sleeps; the module runs in well under a second.

The scripted source is test_policy_faults'.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from typing import Any, cast

import pytest
from kubernetes.client import ApiClient, Configuration
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from controllers.reconcilers import api, derived, spechash, tokens
from controllers.reconcilers.cache import chaincache, ownwrites, secretviews
from controllers.reconcilers.credentialsources import (
    ControllerIdentityNotAllowed,
    SecretNotFound,
    SourceContext,
    UnsupportedSource,
    rotation_settings,
)
from controllers.reconcilers.credentialsources.apikey import APIKeySource
from controllers.reconcilers.credentialsources.aws import AWSCredentialsSource
from controllers.reconcilers.metrics import CredentialMetrics
from controllers.reconcilers.policy import PolicyReconciler, decide
from controllers.reconcilers.policy.decide import RefreshReason
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import errors as api_errors
from controllers.runtime import objects
from controllers.runtime.cache import FullObjectReader
from controllers.runtime.informer import Informer
from controllers.runtime.reconcile import Request
from controllers.runtime.store import Store
from rotator import errors, oidc
from rotator.credentials import Credential
from rotator.observe import NoObserver
from rotator.providers.aws import identity as aws_identity
from rotator.providers.aws import sts as aws_sts
from tests.support import memapi
from tests.support.refusing import refusing
from tests.unit.test_policy_faults import ScriptedSource, session

NS = "ns"
NOW = 1_700_000_000.0
ADMIN_SECRET = "iam-admin"


class Source(ScriptedSource):
    """A scripted source that can be told to copy, to be non-idempotent (an IAM key), to hold a
    finalizer and to fail its release or its discard; it records what it was asked."""

    def __init__(self) -> None:
        super().__init__()
        self.minting = True
        self.is_idempotent = True
        self.finalizer_name: str | None = None
        self.release_error: errors.CredentialError | None = None
        self.released: list[SourceContext] = []
        self.discarded: list[Credential] = []
        self.discard_error: Exception | None = None
        self.unexpected: Exception | None = None
        """Raised by :meth:`mint` instead of the outcome: an error the provider did not map."""

    def calls_provider(self, spec: api.PolicySpec) -> bool:
        return self.minting

    def obtain(self, ctx: SourceContext) -> Credential:
        if self.unexpected is not None:
            self.asked.append(ctx)
            raise self.unexpected
        return super().obtain(ctx)

    def idempotent(self, spec: api.PolicySpec) -> bool:
        return self.is_idempotent

    def finalizer(self, spec: api.PolicySpec) -> str | None:
        return self.finalizer_name

    def protected_secrets(self, spec: api.PolicySpec) -> list[str]:
        return [ADMIN_SECRET] if self.finalizer_name else []

    def release(self, ctx: SourceContext) -> None:
        self.released.append(ctx)
        if self.release_error is not None:
            raise self.release_error

    def discard(self, ctx: SourceContext, minted: Credential) -> None:
        self.discarded.append(minted)
        if self.discard_error is not None:
            raise self.discard_error


def edit_derived(server: memapi.MemAPI, change: Callable[[dict[str, Any]], None]) -> None:
    """Someone else edits policy ``p``'s derived Secret on the server (the caches see it)."""
    secret = server.stored(objects.SECRETS, NS, api.derived_secret_name("p"))
    assert secret is not None, "the derived Secret is stored under its derived name"
    change(secret)
    server.put(objects.SECRETS, secret)


class World:
    """Policy ``p`` on the in-memory API server, with the Secret ``ADMIN_SECRET`` a release
    needs; the caches fed by it (the managed-Secret view, as the controller's)."""

    def __init__(self, start: float = NOW) -> None:
        self.api = memapi.MemAPI()
        self.events = memapi.RecordedEvents()
        self.source = Source()
        self.clock = clocks.FakeClock(start)
        self.registry = CollectorRegistry()
        self.policies, self.managed = Store(), Store()
        self.api.feed(api.POLICIES, self.policies)
        self.api.feed(objects.SECRETS, self.managed, view=secretviews.managed)
        sources = {"AWSCredentials": self.source}
        chaincache.index(policies=self.policies, by_type=sources)
        self.reconciler = PolicyReconciler(
            api_client=self.api,
            policies=self.policies,
            managed_secrets=self.managed,
            secrets=memapi.FullBodies(self.api),  # the scripted source reads no Secret
            secret_versions=Store(),
            sources=sources,
            recorder=self.events,
            metrics=CredentialMetrics(self.registry),
            own_writes=ownwrites.OwnWrites(),
            clock=self.clock,
        )
        self.api.put(objects.SECRETS, {"metadata": {"name": ADMIN_SECRET, "namespace": NS}})
        self.policy = self.put()

    def put(self, **change: Any) -> dict[str, Any]:
        """The policy on the server (and cached): region ``us-east-1``, with ``change`` merged
        into its metadata (``annotations``, ``finalizers``, ``deletionTimestamp``), spec or
        status."""
        metadata: dict[str, Any] = {"name": "p", "namespace": NS, "uid": "u", "generation": 1}
        spec: dict[str, Any] = {
            "type": "AWSCredentials",
            "awsCredentials": {"region": "us-east-1"},
            "targetRefs": [{"name": "b"}],
        }
        for key in ("annotations", "finalizers", "deletionTimestamp"):
            if key in change:
                metadata[key] = change[key]
        spec.update(change.get("spec", {}))
        policy: dict[str, Any] = {
            "apiVersion": api.API_VERSION,
            "kind": "BackendSecurityPolicy",
            "metadata": metadata,
            "spec": spec,
        }
        if "status" in change:
            policy["status"] = change["status"]
        self.policy = self.api.put(api.POLICIES, policy)
        return self.policy

    def serve(self, credential: Credential, *, answered: str | None = None) -> None:
        """The derived Secret as a previous run applied it."""
        secret = derived.build(
            cast(api.Policy, self.policy), credential, minted=True, answered_request=answered
        )
        self.api.put(objects.SECRETS, secret, field_manager=api.FIELD_MANAGER)

    def server_moved_on(self) -> None:
        """The derived Secret changes on the server; the cache has not seen it yet."""
        secret = self.api.stored(objects.SECRETS, NS, api.derived_secret_name("p"))
        assert secret is not None
        self.api.put(objects.SECRETS, secret, cached=False)

    def reconcile(self) -> float | None:
        """One reconcile; what it wrote comes back into the caches, as the informers bring it."""
        try:
            return self.reconciler.reconcile(Request(NS, "p")).requeue_after
        finally:
            self.api.sync()

    def gets(self) -> int:
        """The reads of a Secret from the server (the live read before a non-idempotent mint)."""
        return sum(1 for c in self.api.calls if c.verb is memapi.Verb.GET)

    def statuses(self) -> list[dict[str, Any]]:
        return [w.status for w in self.api.writes_to(api.POLICIES, subresource="status")]

    def finalizer_writes(self) -> list[list[str]]:
        """The finalizer lists applied to the policy."""
        return [
            w.body["metadata"]["finalizers"]
            for w in self.api.writes_to(api.POLICIES)
            if "finalizers" in w.body.get("metadata", {})
        ]

    def secret_writes(self) -> list[Any]:
        """Every Secret write, as sent."""
        return [w.body for w in self.api.writes_to(objects.SECRETS)]

    def secret_patches(self, name: str) -> list[Any]:
        return [w.body for w in self.api.writes_to(objects.SECRETS) if w.name == name]

    def refuse_secret_writes(self, error: api_errors.ApiError) -> None:
        """Every write of the derived Secret fails with ``error``."""
        name = api.derived_secret_name("p")
        self.api.fail(
            error, verb=memapi.Verb.PATCH, resource=objects.SECRETS, name=name, times=None
        )

    def condition(self, type_: str) -> dict[str, Any]:
        return next(c for c in self.statuses()[-1]["conditions"] if c["type"] == type_)

    def reason(self, type_: str) -> tuple[str, str]:
        c = self.condition(type_)
        return c["status"], c["reason"]

    def event_reasons(self) -> list[tuple[str, str]]:
        return [(t, r) for t, r, _ in self.events.events]

    def context(self, credential: Credential | None) -> SourceContext:
        policy = cast(api.Policy, self.policy)
        return SourceContext(
            policy,
            lambda name: None,
            now=self.clock.now(),
            current=credential,
            settings=rotation_settings(policy["spec"]),
        )


@pytest.fixture
def world() -> World:
    return World()


FRESH = session(NOW - 10, NOW + 3590)
"""Issued 10 s ago for an hour: not due."""
DUE = session(NOW - 3000, NOW + 600)
"""Past 2/3 of its lifetime (jitter included): due, still valid."""


# --- decide: the refresh reasons of a minted credential ------------------------------------


def refresh_reason(
    policy: api.Policy, served: derived.Served | None, source: Source, ctx: SourceContext
) -> RefreshReason | None:
    return decide.decide(decide.Inputs(policy, served, source, ctx)).reason


def served_from(world: World, credential: Credential, **annotations: str) -> derived.Served:
    secret = derived.build(cast(api.Policy, world.policy), credential, minted=True)
    secret["metadata"]["annotations"].update(annotations)
    served = derived.read(secret)
    assert served is not None
    return served


def test_refresh_reason_missing(world: World) -> None:
    policy = cast(api.Policy, world.policy)
    assert refresh_reason(policy, None, world.source, world.context(None)) is RefreshReason.MISSING


def test_refresh_reason_edited_data(world: World) -> None:
    served = served_from(world, FRESH)
    tampered = derived.Served(
        Credential({"credentials": b"changed by hand"}, expires_at=NOW + 3590),
        intact=False,
        spec_hash=served.spec_hash,
        answered_request=None,
    )
    policy = cast(api.Policy, world.policy)
    assert (
        refresh_reason(policy, tampered, world.source, world.context(FRESH)) is RefreshReason.EDITED
    )


def test_refresh_reason_edited_annotation(world: World) -> None:
    served = served_from(world, FRESH, **{api.ISSUED_AT_ANNOTATION: "yesterday"})
    assert served.intact
    policy = cast(api.Policy, world.policy)
    assert (
        refresh_reason(policy, served, world.source, world.context(FRESH)) is RefreshReason.EDITED
    )


def test_refresh_reason_spec_changed(world: World) -> None:
    served = served_from(world, FRESH)
    policy = cast(api.Policy, world.put(spec={"awsCredentials": {"region": "eu-west-1"}}))
    assert refresh_reason(policy, served, world.source, world.context(FRESH)) is (
        RefreshReason.SPEC_CHANGED
    )
    policy = cast(api.Policy, world.put(spec={"targetRefs": [{"name": "other"}]}))
    assert refresh_reason(policy, served, world.source, world.context(FRESH)) is not (
        RefreshReason.SPEC_CHANGED
    ), "targetRefs are not what the credential depends on"


def test_refresh_reason_rotation_requested_until_answered(world: World) -> None:
    world.put(annotations={api.ROTATE_REQUESTED_ANNOTATION: "2023-11-14T00:00:00Z"})
    policy = cast(api.Policy, world.policy)
    unanswered = served_from(world, FRESH)
    assert (
        refresh_reason(policy, unanswered, world.source, world.context(FRESH))
        is RefreshReason.ROTATION_REQUESTED
    )
    answered = served_from(
        world, FRESH, **{api.ANSWERED_REQUEST_ANNOTATION: "2023-11-14T00:00:00Z"}
    )
    assert refresh_reason(policy, answered, world.source, world.context(FRESH)) is None


def test_refresh_reason_due_and_none(world: World) -> None:
    policy = cast(api.Policy, world.policy)
    assert refresh_reason(policy, served_from(world, DUE), world.source, world.context(DUE)) is (
        RefreshReason.DUE
    )
    assert (
        refresh_reason(policy, served_from(world, FRESH), world.source, world.context(FRESH))
        is None
    )
    forever = Credential({"credentials": b"k"}, issued_at=NOW - 10)
    assert (
        refresh_reason(policy, served_from(world, forever), world.source, world.context(forever))
        is None
    ), "a credential that never expires is never due"


@pytest.mark.parametrize(
    ("setup", "forced"),
    [
        ("missing", True),
        ("edited", True),
        ("spec changed", True),
        ("rotation requested", True),
        ("due", False),
    ],
)
def test_each_refresh_reason_mints_once_and_only_a_due_one_is_unforced(
    world: World, setup: str, forced: bool
) -> None:
    if setup != "missing":
        world.serve(DUE if setup == "due" else FRESH)
    if setup == "edited":
        edited = {"credentials": base64.b64encode(b"hand edit").decode()}
        edit_derived(world.api, lambda secret: secret.update(data=edited))
    if setup == "spec changed":
        world.put(spec={"awsCredentials": {"region": "eu-west-1"}})
    if setup == "rotation requested":
        world.put(annotations={api.ROTATE_REQUESTED_ANNOTATION: "now please"})
    world.source.outcome = session(NOW, NOW + 3600, b"k2")
    delay = world.reconcile()
    (ctx,) = world.source.asked
    assert ctx.forced is forced
    (written,) = world.secret_writes()
    assert written["data"] == {"credentials": base64.b64encode(b"k2").decode()}
    assert world.reason(api.READY) == ("True", "CredentialsReady")
    assert world.reason(api.ACCEPTED) == ("True", "Accepted")
    renewal = clocks.parse_rfc3339(world.statuses()[-1]["renewalTime"])
    assert delay == renewal - NOW, "the one timer: the next renewal"
    if setup == "rotation requested":
        assert written["metadata"]["annotations"][api.ANSWERED_REQUEST_ANNOTATION] == "now please"


def test_no_reason_serves_the_cached_credential_without_minting_or_writing(
    world: World,
) -> None:
    world.serve(FRESH)
    delay = world.reconcile()
    assert world.source.asked == []
    assert world.secret_writes() == []
    assert world.reason(api.READY) == ("True", "CredentialsReady")
    status = world.statuses()[-1]
    assert status["expirationTime"] == clocks.rfc3339(NOW + 3590)
    assert delay == clocks.parse_rfc3339(status["renewalTime"]) - NOW
    assert delay is not None
    assert 0 < delay < 3590


def test_a_copied_credential_is_derived_and_has_no_timer(world: World) -> None:
    world.source.minting = False
    world.source.outcome = Credential({"apiKey": b"sk-1"})
    assert world.reconcile() is None
    assert len(world.source.asked) == 1
    assert world.source.asked[0].forced is False
    assert len(world.secret_writes()) == 1
    assert "renewalTime" not in world.statuses()[-1]


# --- copies: each source version read once (rotator.dev/source-version) -------------------


class CopyWorld:
    """An API-key policy in namespace ``ns`` copying Secret ``key``, through the real
    :class:`APIKeySource`, :class:`FullObjectReader` and all-Secrets metadata store (fed by the
    in-memory API server through the controller's identity-only view) — as after a restart:
    empty body cache, the derived Secret in the managed cache. :attr:`first` is the version of
    ``key`` the world starts with."""

    def __init__(self) -> None:
        self.api = memapi.MemAPI()
        metadata = Informer(
            clients.Client(ApiClient(Configuration())), objects.SECRETS, metadata_only=True
        )
        self.versions = metadata.store
        self.reader = FullObjectReader(self.api, metadata)
        self.policies, self.managed = Store(), Store()
        self.api.feed(api.POLICIES, self.policies)
        self.api.feed(objects.SECRETS, self.managed, view=secretviews.managed)
        self.api.feed(objects.SECRETS, self.versions, view=secretviews.identity_only)
        sources = {"APIKey": APIKeySource()}
        chaincache.index(policies=self.policies, by_type=sources)
        self.reconciler = PolicyReconciler(
            api_client=self.api,
            policies=self.policies,
            managed_secrets=self.managed,
            secrets=self.reader,
            secret_versions=self.versions,
            sources=sources,
            recorder=memapi.RecordedEvents(),
            metrics=CredentialMetrics(CollectorRegistry()),
            own_writes=ownwrites.OwnWrites(),
            clock=clocks.FakeClock(NOW),
        )
        self.policy: dict[str, Any] = {
            "apiVersion": api.API_VERSION,
            "kind": "BackendSecurityPolicy",
            "metadata": {"name": "p", "namespace": NS, "uid": "u", "generation": 1},
            "spec": {"type": "APIKey", "apiKey": {"secretRef": {"name": "key", "key": "apiKey"}}},
        }
        self.update_policy()
        self.first = self.source("sk-1")

    def update_policy(self) -> None:
        """:attr:`policy`, as changed, onto the server (and the cache)."""
        self.policy = self.api.put(api.POLICIES, self.policy)

    def source(self, value: str, *, namespace: str = NS, cached: bool = True, **more: str) -> str:
        """Secret ``key`` on the server holding ``value`` (and keys ``more``), in the metadata
        cache unless not ``cached`` yet; its resourceVersion."""
        values = {"apiKey": value, **more}
        written = self.api.put(
            objects.SECRETS,
            {
                "metadata": {"name": "key", "namespace": namespace, "uid": "uid-key"},
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
            },
            cached=cached,
        )
        return str(written["metadata"]["resourceVersion"])

    def serve(self, value: str, *, copied_from: str | None) -> None:
        """The derived Secret a previous run wrote; ``copied_from=None``: before the
        annotation (and the copy's spec-hash) existed."""
        secret = derived.build(
            cast(api.Policy, self.policy),
            Credential({"apiKey": value.encode()}),
            minted=False,
            copied_from=copied_from,
        )
        if copied_from is None:
            del secret["metadata"]["annotations"][api.SPEC_HASH_ANNOTATION]
        self.api.put(objects.SECRETS, secret, field_manager=api.FIELD_MANAGER)

    def reconcile(self) -> None:
        try:
            self.reconciler.reconcile(Request(NS, "p"))
        finally:
            self.api.sync()  # the informers bring back what it wrote

    def gets(self) -> list[tuple[str, str]]:
        """The Secrets read from the server, (namespace, name), in order."""
        return [(c.namespace, c.name) for c in self.api.calls if c.verb is memapi.Verb.GET]

    def derived_writes(self) -> list[dict[str, Any]]:
        return [w.body for w in self.api.writes_to(objects.SECRETS) if "data" in w.body]

    def written_version(self) -> str | None:
        annotations = self.derived_writes()[-1]["metadata"]["annotations"]
        return cast(str | None, annotations.get(api.SOURCE_VERSION_ANNOTATION))

    def written_key(self) -> bytes:
        return base64.b64decode(self.derived_writes()[-1]["data"]["apiKey"])


@pytest.fixture
def copy() -> CopyWorld:
    return CopyWorld()


def test_a_copy_from_the_versions_the_cache_shows_reads_and_writes_nothing(
    copy: CopyWorld,
) -> None:
    """The no-op restart: 0 GETs. Mutation caught: the ``decide.copy_is_current`` shortcut removed
    (one GET, as before the annotation)."""
    copy.serve("sk-1", copied_from=copy.first)
    copy.reconcile()
    assert copy.gets() == []
    assert copy.derived_writes() == []


def test_a_copy_recorded_with_uids_before_the_upgrade_reads_nothing_either(
    copy: CopyWorld,
) -> None:
    """Annotations written before source versions dropped their uids (``<uid>/<rv>``) still
    vouch for the copy: an upgrade's restart reads nothing. Mutation caught: comparing the
    annotation as written (one GET per copy on the first restart after the upgrade)."""
    copy.serve("sk-1", copied_from=f"uid-key/{copy.first}")
    copy.reconcile()
    assert copy.gets() == []
    assert copy.derived_writes() == []


def test_a_copy_keeps_no_body_of_the_source_it_read(copy: CopyWorld) -> None:
    """A copy records the version it was made from and never reads that version again, so the
    body reader keeps nothing of it (an API-key source per chain held ~340 bytes each).
    Mutation caught: the reads of a copy kept (``keep=True``)."""
    copy.serve("sk-0", copied_from="0")
    copy.reconcile()
    assert copy.gets() == [(NS, "key")]
    assert copy.written_key() == b"sk-1"
    assert copy.reader.cached_bytes == 0


def test_a_copy_that_fails_reads_its_source_once_per_version(copy: CopyWorld) -> None:
    """Its retries read nothing until the Secret changes: the body is released only once a copy
    was written. Mutation caught: never keeping a copy's source (one GET per retry)."""
    key = copy.api.stored(objects.SECRETS, NS, "key")
    assert key is not None
    copy.api.put(objects.SECRETS, {**key, "data": {"other": "eA=="}})  # the spec's key missing
    copy.reconcile()
    copy.reconcile()
    assert copy.gets() == [(NS, "key")]
    assert copy.derived_writes() == []


def test_a_source_several_policies_copy_is_read_once_per_version(copy: CopyWorld) -> None:
    """One GET per source change however many policies copy it: the body is kept when another
    policy reads the same Secret. Mutation caught: never keeping a copy's source (one GET per
    policy)."""
    second = {**copy.policy, "metadata": {**copy.policy["metadata"], "name": "p2", "uid": "u2"}}
    copy.api.put(api.POLICIES, second)
    copy.reconcile()
    copy.reconciler.reconcile(Request(NS, "p2"))
    assert copy.gets() == [(NS, "key")]
    assert len(copy.derived_writes()) == 2


def test_a_source_at_another_version_is_read_once_and_recorded(copy: CopyWorld) -> None:
    """Mutation caught: recording the version the metadata cache shows instead of the one read
    (the server is a version ahead of the cache)."""
    copy.serve("sk-1", copied_from=copy.first)
    copy.source("sk-2")
    latest = copy.source("sk-2", cached=False)
    copy.reconcile()
    assert copy.gets() == [(NS, "key")]
    assert copy.written_key() == b"sk-2"
    assert copy.written_version() == latest


def test_a_derived_secret_without_the_annotation_is_read_once_then_annotated(
    copy: CopyWorld,
) -> None:
    """The upgrade: one GET, one write adding the annotations (same data), then nothing."""
    copy.serve("sk-1", copied_from=None)
    copy.reconcile()
    assert copy.gets() == [(NS, "key")]
    written = copy.derived_writes()
    assert len(written) == 1
    assert written[0]["data"] == {"apiKey": base64.b64encode(b"sk-1").decode()}, "no new data"
    assert copy.written_version() == copy.first
    copy.api.sync()  # the informer brings it back
    copy.reconcile()
    assert copy.gets() == [(NS, "key")], "annotated: not read again"
    assert len(copy.derived_writes()) == 1


def test_an_edited_derived_secret_is_copied_again_despite_the_version(copy: CopyWorld) -> None:
    """The credential-hash check still holds. Mutation caught: ``served.intact`` not checked."""
    copy.serve("sk-1", copied_from=copy.first)
    edited = {"apiKey": base64.b64encode(b"edited-by-hand").decode()}
    edit_derived(copy.api, lambda secret: secret.update(data=edited))
    copy.reconcile()
    assert copy.gets() == [(NS, "key")]
    assert copy.written_key() == b"sk-1"


def test_a_changed_credential_spec_is_copied_again_despite_the_version(copy: CopyWorld) -> None:
    """Same Secret, same version, another key in it. Mutation caught: the spec hash not
    compared."""
    both = copy.source("sk-1", other="sk-other")
    copy.serve("sk-1", copied_from=both)
    copy.policy["spec"]["apiKey"]["secretRef"]["key"] = "other"
    copy.update_policy()
    copy.reconcile()
    assert copy.gets() == [(NS, "key")]
    assert copy.written_key() == b"sk-other"


def test_a_secret_of_that_name_in_another_namespace_does_not_vouch_for_the_copy(
    copy: CopyWorld,
) -> None:
    """Tenancy: only the policy's own namespace counts. Here the policy's Secret is gone and
    another namespace has one of the same name at the recorded version: SecretNotFound, no
    read of either."""
    elsewhere = copy.source("sk-elsewhere", namespace="other")
    copy.serve("sk-1", copied_from=elsewhere)
    copy.api.remove(objects.SECRETS, NS, "key")
    copy.reconcile()
    assert copy.gets() == []
    assert copy.derived_writes() == []
    (*_, status) = copy.api.writes_to(api.POLICIES, subresource="status")
    ready = next(c for c in status.status["conditions"] if c["type"] == api.READY)
    assert (ready["status"], ready["reason"]) == ("False", "SecretNotFound")


def test_a_copy_with_edited_metadata_is_repaired_without_a_read(copy: CopyWorld) -> None:
    copy.serve("sk-1", copied_from=copy.first)

    def edit(secret: dict[str, Any]) -> None:  # still owned (the managed view keeps its data)
        secret["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = False

    edit_derived(copy.api, edit)
    copy.reconcile()
    assert copy.gets() == []
    assert len(copy.derived_writes()) == 1
    assert copy.written_version() == copy.first


def test_a_minted_credential_not_due_reads_no_secret_after_a_restart() -> None:
    """Minted credentials read their source Secrets (an OIDC client secret, the IAM management
    keys) only to mint: a restart with a fresh credential reads none, so they need no recorded
    version. Checked with the real AWS source, OIDC exchange."""
    copy = CopyWorld()
    aws = AWSCredentialsSource(  # never asked to mint: no AWS clients, no token source
        clients=refusing("AWS clients"),
        tokens=refusing(oidc.TokenSource),
        service_accounts=tokens.ServiceAccountTokens(copy.api, NoObserver()),
    )
    copy.reconciler._sources = {"AWSCredentials": aws}
    copy.policy["spec"] = {
        "type": "AWSCredentials",
        "awsCredentials": {
            "region": "us-east-1",
            "oidcExchangeToken": {
                "oidc": {
                    "issuer": "https://issuer.example",
                    "clientID": "c",
                    "clientSecretRef": {"name": "key", "key": "apiKey"},
                },
                "awsRoleArn": "arn:aws:iam::123456789012:role/r",
                "sessionDuration": "1h",
            },
        },
    }
    copy.update_policy()
    secret = derived.build(cast(api.Policy, copy.policy), FRESH, minted=True)
    copy.api.put(objects.SECRETS, secret, field_manager=api.FIELD_MANAGER)
    copy.reconcile()
    assert copy.gets() == []
    assert copy.derived_writes() == []


# --- RenewBeforeHonored --------------------------------------------------------------------


def test_the_default_schedule_is_as_specified(world: World) -> None:
    world.serve(FRESH)
    world.reconcile()
    assert world.reason(api.RENEW_BEFORE_HONORED) == ("True", "AsSpecified")


def test_a_renew_before_too_long_is_overridden_reported_and_warned_once(world: World) -> None:
    world.put(spec={"rotation": {"renewBefore": "59m"}})
    world.serve(session(NOW - 10, NOW + 3590))
    world.reconcile()
    assert world.reason(api.RENEW_BEFORE_HONORED) == ("False", "RenewBeforeTooLong")
    assert "renewBefore (59m)" in world.condition(api.RENEW_BEFORE_HONORED)["message"]
    assert world.reason(api.READY) == ("True", "CredentialsReady")
    assert "RenewBeforeTooLong" not in world.condition(api.READY)["message"]
    assert "instead" in world.condition(api.READY)["message"], "Ready says so too"
    assert world.event_reasons().count(("Warning", "RenewBeforeTooLong")) == 1
    world.reconcile()
    assert world.event_reasons().count(("Warning", "RenewBeforeTooLong")) == 1, "once"


# --- report.failed -------------------------------------------------------------------------------


def test_a_failed_refresh_while_valid_keeps_ready_true_and_warns_once(world: World) -> None:
    world.serve(DUE)
    delay = world.reconcile()
    assert world.reason(api.READY) == ("True", "RotationFailed")
    message = world.condition(api.READY)["message"]
    assert f"valid until {clocks.rfc3339(NOW + 600)}" in message
    assert "STS down" in message
    assert delay is not None
    assert 0 < delay <= 300, "never more than half the time left"
    status = world.statuses()[-1]
    assert (status["failedAttempts"], status["lastFailureTime"]) == (1, clocks.rfc3339(NOW))
    assert world.event_reasons().count(("Warning", "RotationFailed")) == 1
    world.clock.advance(delay)
    world.reconcile()
    assert world.statuses()[-1]["failedAttempts"] == 2
    assert world.event_reasons().count(("Warning", "RotationFailed")) == 1, "the first only"


def test_a_failed_refresh_after_expiry_is_expired(world: World) -> None:
    world.serve(session(NOW - 3700, NOW - 100))
    world.reconcile()
    assert world.reason(api.READY) == ("False", "Expired")
    assert f"expired at {clocks.rfc3339(NOW - 100)}" in world.condition(api.READY)["message"]
    assert world.reason(api.ACCEPTED) == ("True", "Accepted")


def test_the_timer_counts_from_the_end_of_the_reconcile_that_set_it(world: World) -> None:
    """The queue counts ``requeue_after`` from the reconcile's return, and nothing re-runs the
    policy after its own writes (their events are echoes), so the delay must be computed when
    the reconcile ends. Mutation caught: the delay computed from the reconcile's start (every
    rotation then ran late by the duration of the one before — the provider call and the
    writes; ``make bench`` showed p99 1.1 s)."""
    world.serve(DUE)
    minted = session(NOW, NOW + 3600, b"k2")

    def slow_provider(ctx: SourceContext) -> Credential:
        world.clock.advance(7)  # the provider took 7 s to answer
        return minted

    world.source.obtain = slow_provider  # type: ignore[method-assign]
    delay = world.reconcile()
    renewal = clocks.parse_rfc3339(world.statuses()[-1]["renewalTime"])
    assert delay == renewal - (NOW + 7)


def test_a_refresh_that_hangs_across_the_expiry_is_judged_when_it_fails(world: World) -> None:
    """Validity is judged when the attempt failed, not when the reconcile began. Mutation
    caught: judging at the reconcile's start (the status then said ``RotationFailed``, "valid
    until" a time already past, until the next attempt)."""
    world.serve(DUE)  # valid until NOW + 600

    def hang_past_the_expiry(ctx: SourceContext) -> Credential:
        world.clock.advance(650)  # the provider answered 50 s after the credential expired
        raise errors.ProviderUnavailable("STS timed out")

    world.source.obtain = hang_past_the_expiry  # type: ignore[method-assign]
    world.reconcile()
    assert world.reason(api.READY) == ("False", "Expired")
    assert world.statuses()[-1]["lastFailureTime"] == clocks.rfc3339(NOW + 650)


def test_the_retry_is_bounded_by_the_expiry_so_expired_turns_on_time() -> None:
    world = World(start=NOW + 599.75)  # DUE expires at NOW + 600: a quarter second left
    world.serve(DUE)
    world.put(status={"failedAttempts": 6})  # backoff alone would wait far longer
    delay = world.reconcile()
    assert world.reason(api.READY) == ("True", "RotationFailed")
    assert delay == pytest.approx(0.25)
    assert delay is not None
    world.clock.advance(delay)
    world.reconcile()
    assert world.reason(api.READY) == ("False", "Expired")


@pytest.mark.parametrize(
    ("reason", "error"),
    [
        ("SecretNotFound", SecretNotFound("Secret aws-root not found")),
        ("SecretKeyNotFound", errors.MissingKey("Secret aws-root has no key 'x'")),
        ("InvalidSecretData", errors.InvalidInput("Secret aws-root holds data that is not base64")),
        ("ProviderRejected", errors.ProviderRejected("AccessDenied")),
        ("ProviderUnavailable", errors.ProviderUnavailable("STS down")),
        ("ServiceAccountNotFound", tokens.ServiceAccountNotFound("no ServiceAccount sa")),
        ("ServiceAccountNotPermitted", tokens.ServiceAccountNotPermitted("sa has not opted in")),
        ("InvalidName", tokens.InvalidName("'../x' is not a name")),
        ("InsecureIssuer", oidc.InsecureIssuer("http://issuer is not https")),
        (
            "AssumeRoleFailed",
            aws_sts.AssumeRoleRejected(
                "assumeRole arn:aws:iam::210987654321:role/x: aws-sts AssumeRole failed: "
                "AccessDenied",
                code="AccessDenied",
            ),
        ),
        ("AssumeRoleFailed", aws_sts.AssumeRoleUnavailable("assumeRole …: Throttling")),
        ("ControllerIdentityNotFound", aws_identity.NoIdentity("no AWS credentials found")),
        (
            "ControllerIdentityNotAllowed",
            ControllerIdentityNotAllowed("policies in namespace ns may not use the controller's"),
        ),
        ("RotationFailed", errors.CredentialError("something else")),
    ],
)
def test_a_failure_with_nothing_served_reports_its_own_reason(
    world: World, reason: str, error: errors.CredentialError
) -> None:
    world.source.outcome = error
    delay = world.reconcile()
    assert world.reason(api.READY) == ("False", reason)
    assert world.condition(api.READY)["message"] == str(error)
    assert world.reason(api.ACCEPTED) == ("True", "Accepted")
    assert delay is not None
    assert delay > 0
    assert ("Warning", reason) in world.event_reasons(), "the Ready transition"


def test_an_unmapped_provider_exception_is_provider_unavailable_without_its_text(
    world: World,
) -> None:
    world.source.unexpected = RuntimeError("response body with sk-secret")
    world.reconcile()
    assert world.reason(api.READY) == ("False", "ProviderUnavailable")
    assert "sk-secret" not in world.condition(api.READY)["message"]


def test_an_unsupported_source_is_not_accepted(world: World) -> None:
    world.put(spec={"type": "AzureCredentials"})  # no source registered for it
    world.reconcile()
    assert world.reason(api.ACCEPTED) == ("False", "UnsupportedCredentialSource")
    assert world.reason(api.READY) == ("False", "UnsupportedCredentialSource")
    assert "AzureCredentials" in world.condition(api.ACCEPTED)["message"]
    assert world.source.asked == []
    assert isinstance(UnsupportedSource("x"), errors.InvalidInput)


def test_a_forbidden_secret_write_is_reported_and_the_new_credential_discarded(
    world: World,
) -> None:
    world.refuse_secret_writes(api_errors.Forbidden("secrets is forbidden"))
    world.source.outcome = session(NOW, NOW + 3600, b"k2")
    world.reconcile()
    assert world.reason(api.READY) == ("False", "Forbidden")
    assert "may not write Secrets" in world.condition(api.READY)["message"]
    assert [c.data for c in world.source.discarded] == [{"credentials": b"k2"}]


# --- the non-idempotent mint: cache behind, protect, discard ------------------------------


def test_an_iam_mint_waits_when_the_cache_is_behind_the_server(world: World) -> None:
    world.source.is_idempotent = False
    world.serve(DUE)
    world.server_moved_on()
    assert world.reconcile() == 1.0, "its watch event is on the way"
    assert world.gets() == 1
    assert world.source.asked == []
    assert world.api.writes == []


def test_an_iam_mint_goes_ahead_when_the_cache_holds_the_live_secret(world: World) -> None:
    world.source.is_idempotent = False
    world.serve(DUE)
    world.source.outcome = session(NOW, NOW + 3600, b"k2")
    world.reconcile()
    assert len(world.source.asked) == 1
    assert len(world.secret_writes()) == 1


def test_an_iam_mint_is_not_held_back_when_neither_cache_nor_server_has_the_secret(
    world: World,
) -> None:
    world.source.is_idempotent = False
    world.source.outcome = session(NOW, NOW + 3600, b"k1")
    world.reconcile()
    assert world.gets() == 1
    assert len(world.source.asked) == 1


def test_a_mint_is_never_held_back_by_a_live_read_when_it_is_idempotent(world: World) -> None:
    world.serve(DUE)
    world.server_moved_on()
    world.source.outcome = session(NOW, NOW + 3600, b"k2")
    with pytest.raises(api_errors.Conflict):  # written from the cache's version: retried
        world.reconcile()
    assert world.gets() == 0
    assert len(world.source.asked) == 1


def test_a_secret_write_that_fails_discards_the_minted_key_and_raises(world: World) -> None:
    world.source.is_idempotent = False
    world.source.outcome = session(NOW, NOW + 3600, b"k2")
    world.refuse_secret_writes(api_errors.Conflict("the object has been modified"))
    with pytest.raises(api_errors.Conflict):
        world.reconcile()  # retried with backoff by the controller
    assert [c.data for c in world.source.discarded] == [{"credentials": b"k2"}]


def test_a_discard_that_fails_is_logged_not_raised_over_the_write_error(world: World) -> None:
    world.source.is_idempotent = False
    world.source.outcome = session(NOW, NOW + 3600, b"k2")
    world.source.discard_error = errors.ProviderUnavailable("IAM down")
    world.refuse_secret_writes(api_errors.Conflict("the object has been modified"))
    with pytest.raises(api_errors.Conflict):
        world.reconcile()
    assert len(world.source.discarded) == 1


def test_a_copied_credential_that_cannot_be_written_is_not_discarded(world: World) -> None:
    world.source.minting = False
    world.source.outcome = Credential({"apiKey": b"sk-1"})
    world.refuse_secret_writes(api_errors.Conflict("the object has been modified"))
    with pytest.raises(api_errors.Conflict):
        world.reconcile()
    assert world.source.discarded == []


# --- finalizers ----------------------------------------------------------------------------


def in_use() -> dict[str, Any]:
    return {"metadata": {"finalizers": [api.in_use_finalizer("u")]}}


def test_a_source_with_a_finalizer_gets_it_and_protects_its_secrets_first(world: World) -> None:
    world.source.finalizer_name = api.FINALIZER_IAM_KEY
    world.source.outcome = session(NOW, NOW + 3600, b"k1")
    # The status write names the version the finalizer's write produced: one reconcile, no
    # Conflict from its own earlier write.
    world.reconcile()
    assert world.reason(api.READY) == ("True", "CredentialsReady")
    assert len(world.source.asked) == 1, "minted once"
    assert world.finalizer_writes() == [[api.FINALIZER_IAM_KEY]]
    (protect, *_) = world.secret_patches(ADMIN_SECRET)
    assert protect == in_use()
    plurals = [w.resource.plural for w in world.api.writes]
    assert plurals.index("secrets") < plurals.index("backendsecuritypolicies"), (
        "the Secret is protected before the policy can hold external credentials"
    )


def deleting(world: World, **annotations: str) -> None:
    world.source.finalizer_name = api.FINALIZER_IAM_KEY
    world.put(
        finalizers=[api.FINALIZER_IAM_KEY],
        deletionTimestamp="2023-11-14T22:13:20Z",
        annotations=annotations,
    )
    world.serve(FRESH)


def test_a_deleted_policy_gives_back_its_keys_then_lets_go(world: World) -> None:
    deleting(world)
    assert world.reconcile() is None
    (ctx,) = world.source.released
    assert ctx.current is not None
    assert ctx.current.data == FRESH.data, "release sees the served credential"
    assert world.secret_patches(ADMIN_SECRET) == [
        {"metadata": {"$deleteFromPrimitiveList/finalizers": [api.in_use_finalizer("u")]}}
    ]
    assert world.finalizer_writes() == [[]]
    assert world.source.asked == [], "nothing is minted for a policy being deleted"


def test_a_release_that_fails_keeps_the_finalizer_and_says_how_out(world: World) -> None:
    deleting(world)
    world.source.release_error = errors.ProviderRejected("AccessDenied on DeleteAccessKey")
    delay = world.reconcile()
    assert world.reason(api.READY) == ("False", "ReleaseFailed")
    message = world.condition(api.READY)["message"]
    assert "AccessDenied on DeleteAccessKey" in message
    assert api.SKIP_RELEASE_ANNOTATION in message
    assert world.finalizer_writes() == []
    assert world.secret_patches(ADMIN_SECRET) == [], "its Secrets stay protected"
    assert delay is not None
    assert delay > 0
    assert world.statuses()[-1]["failedAttempts"] == 1


def test_a_transient_release_failure_is_raised_for_backoff(world: World) -> None:
    deleting(world)
    world.source.release_error = errors.ProviderUnavailable("IAM throttled")
    with pytest.raises(errors.ProviderUnavailable):
        world.reconcile()
    assert world.api.writes == []


def test_skip_release_lets_go_without_giving_back_and_warns(world: World) -> None:
    deleting(world, **{api.SKIP_RELEASE_ANNOTATION: "true"})
    world.reconcile()
    assert world.source.released == []
    assert ("Warning", "ReleaseSkipped") in world.event_reasons()
    assert world.finalizer_writes() == [[]]
    assert len(world.secret_patches(ADMIN_SECRET)) == 1, "unprotected"


def test_a_deleted_policy_without_the_finalizer_is_left_alone(world: World) -> None:
    world.put(deletionTimestamp="2023-11-14T22:13:20Z", finalizers=["someone.else/keep"])
    assert world.reconcile() is None
    assert world.api.writes == []
    assert world.source.released == []


def test_a_deleted_policy_whose_source_is_gone_just_lets_go(world: World) -> None:
    world.put(
        spec={"type": "AzureCredentials"},
        finalizers=[api.FINALIZER_IAM_KEY],
        deletionTimestamp="2023-11-14T22:13:20Z",
    )
    world.reconcile()
    assert world.finalizer_writes() == [[]]


def test_a_policy_gone_from_the_cache_is_forgotten(world: World) -> None:
    world.serve(FRESH)
    world.reconcile()
    labels = {"namespace": NS, "name": "p", "type": "AWSCredentials"}
    metric = "rotator_credential_expiration_timestamp_seconds"
    assert world.registry.get_sample_value(metric, labels) == NOW + 3590
    world.api.remove(api.POLICIES, NS, "p")
    assert world.reconcile() is None
    assert world.registry.get_sample_value(metric, labels) is None


# --- the spec hash across an upgrade (controllers/reconcilers/spechash.py) -------------------


def b786434_spec_hash(spec: dict[str, Any]) -> str:
    """What rotator up to b786434 recorded: the block as the API server served it, with the
    CRD's defaults written out."""
    kind = spec["type"]
    text = json.dumps({"type": kind, "block": spec[api.CREDENTIAL_BLOCKS[kind]]}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def record_spec_hash(server: memapi.MemAPI, value: str) -> None:
    """The derived Secret of policy ``p`` as an earlier version wrote it: ``value`` as its
    spec-hash."""
    secret = server.stored(objects.SECRETS, NS, api.derived_secret_name("p"))
    assert secret is not None
    secret["metadata"]["annotations"][api.SPEC_HASH_ANNOTATION] = value
    server.put(objects.SECRETS, secret, field_manager=api.FIELD_MANAGER)


def as_served_api_key(copy: CopyWorld) -> None:
    """The copy's policy as the API server serves it: ``header`` at its CRD default."""
    copy.policy["spec"]["apiKey"]["header"] = "Authorization"
    copy.update_policy()


def test_a_copy_whose_spec_hash_is_in_b786434s_form_reads_and_writes_nothing(
    copy: CopyWorld,
) -> None:
    """The upgrade from b786434: its hash included the defaults, today's leaves them out; the
    recorded value still reads as the same spec, so the copy is current and the annotation is
    not rewritten to migrate it. Mutations caught: ``judge`` without the earlier form (one GET,
    one write); ``keep_recorded_spec_hash`` doing nothing (one write, ``repaired``)."""
    as_served_api_key(copy)
    copy.serve("sk-1", copied_from=copy.first)
    old = b786434_spec_hash(copy.policy["spec"])
    assert old != spechash.of(cast(api.PolicySpec, copy.policy["spec"])), "the forms differ"
    record_spec_hash(copy.api, old)
    copy.reconcile()
    assert copy.gets() == []
    assert copy.derived_writes() == []


def test_a_spec_hash_in_b786434s_form_takes_todays_with_the_next_write_of_new_data(
    copy: CopyWorld,
) -> None:
    as_served_api_key(copy)
    copy.serve("sk-1", copied_from=copy.first)
    record_spec_hash(copy.api, b786434_spec_hash(copy.policy["spec"]))
    copy.source("sk-2")
    copy.reconcile()
    assert copy.written_key() == b"sk-2"
    annotations = copy.derived_writes()[-1]["metadata"]["annotations"]
    assert annotations[api.SPEC_HASH_ANNOTATION] == spechash.of(
        cast(api.PolicySpec, copy.policy["spec"])
    )


def test_a_minted_credential_whose_spec_hash_is_in_b786434s_form_is_kept(world: World) -> None:
    """Mutation caught: ``judge`` without the earlier form (minted again, ``spec changed``)."""
    token = {
        "serviceAccountName": "sa",
        "awsRoleArn": "arn:aws:iam::123456789012:role/r",
        "audience": "sts.amazonaws.com",
        "sessionDuration": "1h",
    }
    world.put(spec={"awsCredentials": {"region": "us-east-1", "serviceAccountToken": token}})
    world.serve(FRESH)
    record_spec_hash(world.api, b786434_spec_hash(world.policy["spec"]))
    world.reconcile()
    assert world.source.asked == []
    assert world.secret_writes() == []


def test_an_untrusted_spec_hash_is_minted_again_once_and_said_so(world: World) -> None:
    """1f52da0's form (``{"block": null}``, the same for every AWS policy) cannot say what the
    credential was minted for: minted again, on purpose, with its own reason in the log and a
    Normal Event; the new Secret records today's form, so the next reconcile mints nothing.
    Mutation caught: the form judged ``CHANGED`` (minted as ``spec changed``, no Event)."""
    world.serve(FRESH)
    text = json.dumps({"type": "AWSCredentials", "block": None}, sort_keys=True)
    untrusted = hashlib.sha256(text.encode()).hexdigest()[:16]
    record_spec_hash(world.api, untrusted)
    world.source.outcome = session(NOW, NOW + 3600, b"k2")
    with capture_logs() as logs:
        world.reconcile()
    (ctx,) = world.source.asked
    assert ctx.forced
    (written,) = world.secret_writes()
    spec = cast(api.PolicySpec, world.policy["spec"])
    assert written["metadata"]["annotations"][api.SPEC_HASH_ANNOTATION] == spechash.of(spec)
    assert world.event_reasons().count(("Normal", api.REASON_UNTRUSTED_SPEC_HASH)) == 1
    said = [e for e in logs if e["event"] == "policy.untrusted_spec_hash"]
    assert [e["recorded"] for e in said] == [untrusted]
    minted = [e["why"] for e in logs if e["event"] == "policy.credentials_minted"]
    assert minted == ["spec hash untrusted"]

    world.reconcile()  # the informer brought the written Secret back
    assert len(world.source.asked) == 1, "once"
    assert world.event_reasons().count(("Normal", api.REASON_UNTRUSTED_SPEC_HASH)) == 1
