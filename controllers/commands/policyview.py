"""What a policy and its derived Secret say about the served credential, read from outside the
controller: the facts ``rotator status`` prints and ``rotator renew --wait`` waits on.

Nothing here reads a Secret's data: the derived Secret is seen through its name, annotations and
key names only (:class:`Served`), so no credential byte can reach a command's output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controllers.reconcilers import api, conditions
from controllers.runtime import objects
from rotator import errors

TRANSIENT_READY_REASONS = frozenset({errors.ProviderUnavailable.reason, "Expired"})
"""``Ready=False`` reasons rotator retries past without anyone's help (docs/api.md): a provider
that did not answer, or an expired credential whose refresh keeps failing for a reason the
message gives. Every other ``Ready=False`` reason waits for a fix of the spec, a Secret, the
ServiceAccount or the cloud side."""


def copies(spec: Mapping[str, Any]) -> bool:
    """Whether rotator copies the credential from a Secret (re-read on every change of it)
    rather than minting it: the policy types whose ``CredentialSource.calls_provider`` is false
    (``APIKey``, ``AWSCredentials.credentialsFile`` without ``assumeRole``: a chain on the file
    mints sessions). A copy has nothing to renew."""
    kind = spec.get("type")
    if kind == "APIKey":
        return True
    aws = spec.get("awsCredentials") or {}
    return kind == "AWSCredentials" and "credentialsFile" in aws and "assumeRole" not in aws


def source_of(spec: Mapping[str, Any]) -> str:
    """The credential source the spec names (``serviceAccountToken``, ``credentialsFile``…):
    the object-valued fields of its credential block; empty for ``APIKey``, which has one."""
    kind = str(spec.get("type", ""))
    if kind == "APIKey":
        return ""
    block = spec.get(api.CREDENTIAL_BLOCKS.get(kind, "")) or {}
    return "+".join(k for k, v in block.items() if isinstance(v, dict))


def derived_secret_name(policy: Mapping[str, Any]) -> str:
    """The derived Secret's name: as the status reports it, else as rotator names it."""
    reported = (policy.get("status") or {}).get("derivedSecretName")
    return str(reported or api.derived_secret_name(objects.name(policy)))


@dataclass(frozen=True)
class Served:
    """The derived Secret as a command may see it: never its data, only the names of its keys."""

    name: str
    keys: tuple[str, ...]
    issued_at: str | None
    expires_at: str | None
    answered_request: str | None

    @classmethod
    def of(cls, secret: Mapping[str, Any]) -> Served:
        annotations = objects.meta(secret).get("annotations") or {}
        return cls(
            name=objects.name(secret),
            keys=tuple(sorted(secret.get("data") or {})),
            issued_at=annotations.get(api.ISSUED_AT_ANNOTATION),
            expires_at=annotations.get(api.EXPIRATION_ANNOTATION),
            answered_request=annotations.get(api.ANSWERED_REQUEST_ANNOTATION),
        )


@dataclass(frozen=True)
class Attempts:
    """How many refreshes have failed in a row and when the last did: a change means an attempt
    failed since (``failedAttempts`` grows on every failure, and drops to 0 on a success)."""

    failed: int
    last_failure: str | None

    @classmethod
    def of(cls, policy: Mapping[str, Any]) -> Attempts:
        status = policy.get("status") or {}
        return cls(int(status.get("failedAttempts") or 0), status.get("lastFailureTime"))


@dataclass(frozen=True)
class Failure:
    """A failed refresh, as the policy's ``Ready`` condition reports it."""

    status: str
    reason: str
    message: str
    permanent: bool
    """``Ready=False`` with a reason no retry gets past (see :data:`TRANSIENT_READY_REASONS`);
    ``Ready=True`` (``RotationFailed``: the served credential is still valid) never is."""

    def __str__(self) -> str:
        return f"Ready={self.status} {self.reason}: {self.message}"


def failure_since(before: Attempts, policy: Mapping[str, Any]) -> Failure | None:
    """The failure ``policy`` reports if a refresh failed after ``before`` was read, else None."""
    now = Attempts.of(policy)
    if now.failed == 0 or now == before:
        return None
    ready = conditions.of(policy, api.READY)
    if ready is None:
        return None
    status, reason = str(ready.get("status", "")), str(ready.get("reason", ""))
    return Failure(
        status,
        reason,
        str(ready.get("message", "")),
        permanent=status == "False" and reason not in TRANSIENT_READY_REASONS,
    )
