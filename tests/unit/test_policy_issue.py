"""Issuing on its own (controllers/reconcilers/policy/issue.py): what an obtained credential
becomes before it is written, what a write changes, and the compensation when it fails."""

from __future__ import annotations

from typing import Any, cast

import pytest

from controllers.reconcilers import api, derived
from controllers.reconcilers.cache import chaincache, ownwrites, secretviews
from controllers.reconcilers.credentialsources import CredentialSource, SourceContext
from controllers.reconcilers.policy import issue
from controllers.runtime import errors as api_errors
from controllers.runtime import objects
from controllers.runtime.store import Store
from rotator import errors
from rotator.credentials import Credential
from tests.support import memapi

NOW = 1_700_000_000.0
POLICY = cast(
    api.Policy,
    {
        "apiVersion": api.API_VERSION,
        "kind": "BackendSecurityPolicy",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"type": "APIKey", "apiKey": {"secretRef": {"name": "key", "key": "apiKey"}}},
    },
)


class Source(CredentialSource):
    def __init__(self, outcome: Exception | None = None) -> None:
        self.outcome = outcome
        self.discarded: list[Credential] = []

    def secret_refs(self, spec: api.PolicySpec) -> list[api.SecretRef]:
        return [spec["apiKey"]["secretRef"]]

    def obtain(self, ctx: SourceContext) -> Credential:
        if self.outcome is not None:
            raise self.outcome
        return Credential({"apiKey": b"sk"})

    def discard(self, ctx: SourceContext, minted: Credential) -> None:
        self.discarded.append(minted)


def issuer(
    server: memapi.MemAPI | None = None,
    reader: memapi.FullBodies | None = None,
    managed: Store | None = None,
) -> issue.Issuer:
    """An issuer over the in-memory API server ``server`` (a new one by default)."""
    server = server or memapi.MemAPI()
    policies = Store()
    chaincache.index(policies=policies, by_type={"APIKey": Source()})
    policies.upsert(cast(dict[str, Any], POLICY))
    return issue.Issuer(
        api_client=server,
        caches=issue.Caches(
            policies, managed or Store(), reader or memapi.FullBodies(server), Store()
        ),
        own_writes=ownwrites.OwnWrites(),
    )


def refusing(refusal: api_errors.ApiError) -> memapi.MemAPI:
    """A server that refuses every patch with ``refusal``."""
    server = memapi.MemAPI()
    server.fail(refusal, verb=memapi.Verb.PATCH, times=None)
    return server


def ctx() -> SourceContext:
    return SourceContext(POLICY, lambda _: None, now=NOW)


def test_an_undated_mint_is_issued_now_in_whole_seconds() -> None:
    minted = Credential({"k": b"v"}, expires_at=NOW + 3599.7)
    reads = issuer().reads("ns")
    got = issuer().issued(POLICY, Source(), minted, now=NOW + 0.4, reads=reads, minted=True)
    assert got == issue.Issued(
        Credential({"k": b"v"}, issued_at=NOW, expires_at=NOW + 3599), minted=True
    )


def test_a_copy_records_the_versions_it_was_read_at_and_only_those() -> None:
    server = memapi.MemAPI()
    key = server.put(
        objects.SECRETS,
        {"metadata": {"name": "key", "namespace": "ns"}, "data": {"apiKey": "c2s="}},
    )
    it = issuer(server)
    reads = it.reads("ns")
    unread = it.issued(POLICY, Source(), Credential({}), now=NOW, reads=reads, minted=False)
    assert unread.copied_from is None, "nothing was read: nothing vouches for the copy"
    assert reads("key") == {"apiKey": "c2s="}
    read = it.issued(POLICY, Source(), Credential({}), now=NOW, reads=reads, minted=False)
    assert read.copied_from == key["metadata"]["resourceVersion"]


def test_an_unmapped_provider_exception_is_provider_unavailable_without_its_text() -> None:
    got = issuer().obtain(POLICY, Source(RuntimeError("body with sk-secret")), ctx())
    assert isinstance(got, errors.ProviderUnavailable)
    assert "sk-secret" not in str(got)
    mapped = issuer().obtain(POLICY, Source(errors.ProviderRejected("no")), ctx())
    assert isinstance(mapped, errors.ProviderRejected)


def test_a_write_says_what_it_changed_and_writes_nothing_when_nothing_did() -> None:
    managed, server = Store(), memapi.MemAPI()
    server.feed(objects.SECRETS, managed, view=secretviews.managed)
    it = issuer(server, managed=managed)
    first = issue.Issued(Credential({"apiKey": b"sk-1"}), minted=False, copied_from="7")
    assert it.write(POLICY, first) is derived.Change.CREATED
    assert len(server.writes_to(objects.SECRETS)) == 1
    server.sync()  # the informer brings the written Secret back
    assert it.write(POLICY, first) is derived.Change.NONE
    assert len(server.writes_to(objects.SECRETS)) == 1
    second = issue.Issued(Credential({"apiKey": b"sk-2"}), minted=False, copied_from="8")
    assert it.write(POLICY, second) is derived.Change.ROTATED


def test_a_forbidden_write_undoes_a_mint_and_is_returned_to_be_reported() -> None:
    source = Source()
    minted = issue.Issued(Credential({"k": b"new"}), minted=True)
    it = issuer(refusing(api_errors.Forbidden("secrets is forbidden")))
    got = it.serve(POLICY, source, minted, ctx())
    assert isinstance(got, issue.WriteForbidden)
    assert got.reason == "Forbidden"
    assert source.discarded == [minted.credential]


def test_any_other_write_failure_is_raised_and_a_copy_is_never_discarded() -> None:
    source = Source()
    copy = issue.Issued(Credential({"apiKey": b"sk"}), minted=False)
    it = issuer(refusing(api_errors.Conflict("modified")))
    with pytest.raises(api_errors.Conflict):
        it.serve(POLICY, source, copy, ctx())
    assert source.discarded == []


def test_a_copy_served_drops_the_bodies_of_its_sources_no_other_policy_reads() -> None:
    server = memapi.MemAPI()
    reader = memapi.FullBodies(server)
    copy = issue.Issued(Credential({"apiKey": b"sk"}), minted=False, copied_from="7")
    issuer(server, reader).serve(POLICY, Source(), copy, ctx())
    assert reader.forgotten == [("ns", "key")]
