"""The BackendSecurityPolicy reconciler: credentials into the derived Secret, status, and a
word to the ServiceBackends it targets.

Level-triggered: every reconcile derives the credential from the spec and the referenced Secrets,
compares the derived Secret and the status with what the cache holds, and writes only what
differs. It then tells every targeted backend to look again (the backend channel de-duplicates).

A failure writes the reason to ``Ready`` (and an Event when the reason changes), counts
``failedAttempts``, and asks to be reconciled again after a backoff from ``rotator.schedule`` —
never a hot loop, and it recovers on its own when the referenced Secret is fixed (the Secret
controller sends the policy again).
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Mapping
from typing import Any, cast

import structlog

from controllers.reconcilers import api, conditions, status
from controllers.reconcilers.conditions import false, true
from controllers.reconcilers.credentials import (
    CredentialSource,
    MintContext,
    UnsupportedSource,
)
from controllers.runtime import apply, channel, events, objects
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime.cache import FullObjectReader
from controllers.runtime.reconcile import Request, Result
from controllers.runtime.store import Store
from rotator import errors, schedule
from rotator.credentials import Credential

log = structlog.get_logger(__name__)

ACCEPTED = "Accepted"
READY = "Ready"


class Change(enum.Enum):
    """What a reconcile did to the derived Secret."""

    NONE = "none"
    CREATED = "created"
    ROTATED = "rotated"
    REPAIRED = "repaired"


class PolicyReconciler:
    def __init__(
        self,
        *,
        api_client: clients.Client,
        policies: Store,
        managed_secrets: Store,
        secrets: FullObjectReader,
        sources: Mapping[str, CredentialSource],
        recorder: events.EventRecorder,
        to_backends: channel.Channel[Request],
        clock: clocks.Clock,
    ) -> None:
        self._api = api_client
        self._policies = policies
        self._managed = managed_secrets
        self._secrets = secrets
        self._sources = sources
        self._recorder = recorder
        self._to_backends = to_backends
        self._clock = clock

    def reconcile(self, request: Request) -> Result:
        cached = self._policies.get(request.key)
        if cached is None or objects.is_being_deleted(cached):
            return Result()  # the derived Secret goes with its owner (garbage collector)
        policy = cast(api.Policy, cached)
        now = self._clock.now()
        try:
            credential = self._mint(policy)
        except errors.CredentialError as exc:
            delay = self._record_failure(policy, exc, now)
            self._notify_targets(policy)
            return Result(requeue_after=delay)
        change = self._ensure_derived_secret(policy, credential)
        self._record_success(policy, credential, change, now)
        self._notify_targets(policy)
        return Result()

    # --- credential --------------------------------------------------------------------------

    def _mint(self, policy: api.Policy) -> Credential:
        kind = policy["spec"]["type"]
        source = self._sources.get(kind)
        if source is None:
            raise UnsupportedSource(f"this version of rotator cannot mint {kind} credentials")
        namespace = objects.namespace(policy)

        def secret_data(name: str) -> Mapping[str, str] | None:
            secret = self._secrets.get(namespace, name)
            return None if secret is None else dict(secret.get("data") or {})

        return source.mint(MintContext(policy, secret_data))

    def _ensure_derived_secret(self, policy: api.Policy, credential: Credential) -> Change:
        """Writes the derived Secret if it differs from the cached one; says what changed."""
        desired = derived_secret(policy, credential)
        md = desired["metadata"]
        actual = self._managed.get(objects.make_key(md["namespace"], md["name"]))
        if actual is None:
            change = Change.CREATED
        elif (actual.get("data") or {}) != desired["data"]:
            change = Change.ROTATED
        elif not apply.subset(md, actual.get("metadata")) or (
            api.EXPIRATION_ANNOTATION not in md["annotations"]
            and api.EXPIRATION_ANNOTATION in (objects.meta(actual).get("annotations") or {})
        ):
            change = Change.REPAIRED  # edited by someone: put our metadata back
        else:
            return Change.NONE
        apply.apply(
            self._api,
            objects.SECRETS,
            desired,
            field_manager=api.FIELD_MANAGER,
            resource_version=objects.meta(actual).get("resourceVersion") if actual else None,
        )
        log.info("policy.derived_secret_written", secret=md["name"], change=change.value)
        return change

    # --- status ------------------------------------------------------------------------------

    def _record_success(
        self, policy: api.Policy, credential: Credential, change: Change, now: float
    ) -> None:
        old = policy.get("status") or {}
        name = api.derived_secret_name(objects.name(policy))
        message = f"credentials are in Secret {name}"
        if credential.expires_at is not None:
            message += f", valid until {clocks.rfc3339(credential.expires_at)}"
        fields: dict[str, Any] = {"derivedSecretName": name, "failedAttempts": 0}
        new_data = change in (Change.CREATED, Change.ROTATED)
        last_rotation = clocks.rfc3339(now) if new_data else old.get("lastRotationTime")
        if last_rotation:
            fields["lastRotationTime"] = last_rotation
        if credential.expires_at is not None:
            fields["expirationTime"] = clocks.rfc3339(credential.expires_at)
        if "lastFailureTime" in old:
            fields["lastFailureTime"] = old["lastFailureTime"]
        updates = [
            true(ACCEPTED, "Accepted", "the spec is valid"),
            true(READY, "CredentialsReady", message),
        ]
        self._write_status(policy, fields, updates, now)
        if change is Change.ROTATED:
            self._recorder.event(
                policy, events.NORMAL, "CredentialsRotated", f"new credentials in Secret {name}"
            )

    def _record_failure(self, policy: api.Policy, exc: errors.CredentialError, now: float) -> float:
        old: dict[str, Any] = dict(policy.get("status") or {})
        attempts = int(old.get("failedAttempts") or 0) + 1
        fields: dict[str, Any] = {
            k: v for k, v in old.items() if k not in ("conditions", "failedAttempts")
        }
        fields.update(failedAttempts=attempts, lastFailureTime=clocks.rfc3339(now))
        accepted = (
            false(ACCEPTED, exc.reason, str(exc))
            if isinstance(exc, UnsupportedSource)
            else true(ACCEPTED, "Accepted", "the spec is valid")
        )
        ready = false(READY, exc.reason, str(exc))
        self._write_status(policy, fields, [accepted, ready], now)
        expires = old.get("expirationTime")
        delay = schedule.retry_delay(
            attempts, now=now, expires_at=clocks.parse_rfc3339(expires) if expires else None
        )
        log.warning(
            "policy.credentials_failed",
            reason=exc.reason,
            error=str(exc),
            attempts=attempts,
            retry_in=round(delay, 2),
        )
        return delay

    def _write_status(
        self, policy: api.Policy, fields: dict[str, Any], updates: list[conditions.Cond], now: float
    ) -> None:
        status.write(
            self._api,
            self._recorder,
            policy,
            api.POLICIES,
            fields=fields,
            updates=updates,
            now=now,
            event_types=(READY,),
        )

    def _notify_targets(self, policy: api.Policy) -> None:
        namespace = objects.namespace(policy)
        for ref in policy["spec"].get("targetRefs") or []:
            self._to_backends.send(Request(namespace, ref["name"]))


def derived_secret(policy: api.Policy, credential: Credential) -> dict[str, Any]:
    """The derived Secret (DESIGN §3): name, labels, annotations, owner, data."""
    annotations = {api.CREDENTIAL_HASH_ANNOTATION: credential.content_hash}
    if credential.expires_at is not None:
        annotations[api.EXPIRATION_ANNOTATION] = clocks.rfc3339(credential.expires_at)
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
