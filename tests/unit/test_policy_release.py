"""Release on its own (controllers/reconcilers/policy/release.py): the policy's finalizer, the
in-use finalizers on the Secrets its release needs, and the release of a deleted policy."""

from __future__ import annotations

from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from controllers.reconcilers import api
from controllers.reconcilers.credentialsources import CredentialSource, SourceContext
from controllers.reconcilers.metrics import CredentialMetrics
from controllers.reconcilers.policy import issue, release, report
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import objects
from controllers.runtime.store import Store
from rotator import errors
from tests.support import memapi

NOW = 1_700_000_000.0
IN_USE = api.in_use_finalizer("u")


class KeySource(CredentialSource):
    """An IAM-key-like source: a finalizer, one Secret its release needs."""

    def __init__(self, error: errors.CredentialError | None = None) -> None:
        self.error = error
        self.released = 0

    def finalizer(self, spec: api.PolicySpec) -> str | None:
        return api.FINALIZER_IAM_KEY

    def protected_secrets(self, spec: api.PolicySpec) -> list[str]:
        return ["admin"]

    def release(self, ctx: SourceContext) -> None:
        self.released += 1
        if self.error is not None:
            raise self.error


DELETED = {"deletionTimestamp": "2023-11-14T22:13:20Z", "finalizers": [api.FINALIZER_IAM_KEY]}


class World:
    """Release over the in-memory API server, which holds the Secret ``admin`` a release
    needs."""

    def __init__(self) -> None:
        self.api, self.events = memapi.MemAPI(), memapi.RecordedEvents()
        self.api.put(objects.SECRETS, {"metadata": {"name": "admin", "namespace": "ns"}})
        clock = clocks.FakeClock(NOW)
        self.release = release.Release(
            api_client=self.api,
            caches=issue.Caches(Store(), Store(), memapi.FullBodies(self.api), Store()),
            writer=report.Writer(
                api_client=self.api,
                recorder=self.events,
                metrics=CredentialMetrics(CollectorRegistry()),
                clock=clock,
            ),
            clock=clock,
        )

    def policy(self, **metadata: Any) -> api.Policy:
        """Policy ``p`` as the server holds it, with ``metadata`` merged into its metadata."""
        return cast(
            api.Policy,
            self.api.put(
                api.POLICIES,
                {
                    "apiVersion": api.API_VERSION,
                    "kind": "BackendSecurityPolicy",
                    "metadata": {"name": "p", "namespace": "ns", "uid": "u", **metadata},
                    "spec": {"type": "AWSCredentials", "awsCredentials": {"region": "us-east-1"}},
                },
            ),
        )

    def writes(self, resource: objects.Resource) -> list[Any]:
        """(name, body) of each accepted write of ``resource`` (its object or its status)."""
        return [(w.name, w.body) for w in self.api.writes if w.resource == resource]


@pytest.fixture
def world() -> World:
    return World()


def test_protect_and_unprotect_add_and_remove_the_policys_own_finalizer(world: World) -> None:
    world.release.protect(world.policy(), KeySource())
    world.release.unprotect(world.policy(), KeySource())
    assert world.writes(objects.SECRETS) == [
        ("admin", {"metadata": {"finalizers": [IN_USE]}}),
        ("admin", {"metadata": {"$deleteFromPrimitiveList/finalizers": [IN_USE]}}),
    ]
    assert {w.patch_type for w in world.api.writes} == {clients.PatchType.STRATEGIC}
    admin = world.api.stored(objects.SECRETS, "ns", "admin")
    assert admin is not None
    assert "finalizers" not in admin["metadata"], "added, then removed"


def test_the_finalizer_comes_after_the_secrets_are_protected_and_only_once(world: World) -> None:
    world.release.ensure_finalizer(world.policy(), KeySource())
    assert [w.resource for w in world.api.writes] == [objects.SECRETS, api.POLICIES]
    admin = world.api.stored(objects.SECRETS, "ns", "admin")
    assert admin is not None
    assert admin["metadata"]["finalizers"] == [IN_USE]
    written = len(world.api.writes)
    world.release.ensure_finalizer(world.policy(finalizers=[api.FINALIZER_IAM_KEY]), KeySource())
    assert len(world.api.writes) == written


def test_a_release_lets_go_once_its_keys_are_given_back(world: World) -> None:
    source = KeySource()
    assert world.release.finalize(world.policy(**DELETED), source).requeue_after is None
    assert source.released == 1
    ((_, unprotect),) = world.writes(objects.SECRETS)
    assert "$deleteFromPrimitiveList/finalizers" in unprotect["metadata"]
    ((_, finalizers),) = world.writes(api.POLICIES)
    assert finalizers["metadata"]["finalizers"] == []


def test_a_permanent_release_failure_keeps_everything_and_is_reported(world: World) -> None:
    source = KeySource(errors.ProviderRejected("AccessDenied on DeleteAccessKey"))
    delay = world.release.finalize(world.policy(**DELETED), source).requeue_after
    assert delay is not None
    assert delay > 0
    assert world.writes(objects.SECRETS) == [], "its Secrets stay protected"
    ((_, body),) = world.writes(api.POLICIES)
    ready = next(c for c in body["status"]["conditions"] if c["type"] == api.READY)
    assert (ready["status"], ready["reason"]) == ("False", "ReleaseFailed")
    assert body["status"]["failedAttempts"] == 1


def test_a_transient_release_failure_is_raised_and_nothing_written(world: World) -> None:
    with pytest.raises(errors.ProviderUnavailable):
        world.release.finalize(
            world.policy(**DELETED), KeySource(errors.ProviderUnavailable("IAM"))
        )
    assert world.api.writes == []


def test_skip_release_warns_and_lets_go_without_asking(world: World) -> None:
    source = KeySource()
    skipping = world.policy(**DELETED, annotations={api.SKIP_RELEASE_ANNOTATION: "true"})
    world.release.finalize(skipping, source)
    assert source.released == 0
    assert [(t, r) for t, r, _ in world.events.events] == [("Warning", "ReleaseSkipped")]
    assert len(world.writes(api.POLICIES)) == 1


def test_a_policy_without_the_finalizer_is_left_alone(world: World) -> None:
    world.release.finalize(world.policy(deletionTimestamp="2023-11-14T22:13:20Z"), KeySource())
    assert world.api.writes == []
