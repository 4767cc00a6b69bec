"""The reasons of rotator's conditions and Events (documented in docs/api.md), each value
written once: a provider's own reasons on its errors in rotator/, re-exported here where a
reconciler names them. Part of :mod:`controllers.reconcilers.api`, which re-exports it."""

from __future__ import annotations

from rotator import errors
from rotator.providers.aws import sts

# --- condition reasons and Event reasons users see (besides those of rotator.errors) -----------

REASON_INVALID_CREDENTIALS = "InvalidCredentials"
"""Route ``ResolvedRefs``: a backend's derived credentials cannot be put into the configuration
(not UTF-8 text, or an unreadable expiry); the backend is left out."""
REASON_CONFIG_TOO_LARGE = "ConfigTooLarge"
"""Route ``Programmed=False``: the configuration exceeds what a Secret can hold; the previous one
stays in place, stale."""
REASON_CONFIG_REJECTED = "ConfigRejected"
"""Route ``Programmed=False``: the API server refused the configuration Secret as invalid."""
REASON_NOT_EXPRESSIBLE = "NotExpressible"
"""Route ``Translated=False``: part of the spec is left out of a LiteLLM configuration."""
REASON_TRANSLATED = "Translated"
"""Route ``Translated=True``: the LiteLLM configuration holds every reachable rule of the spec."""
REASON_FIRST_CONFIGURATION = "FirstConfiguration"
"""Route ``RolloutRestarted=True``: the first configuration (or the one current when targets were
added) is recorded and nothing restarted; its changes roll the targets out."""
REASON_RESTARTED = "Restarted"
"""Route ``RolloutRestarted=True``, and the Normal Event of each rollout: every target's pod
template now carries the configuration's hash."""
REASON_TARGET_NOT_FOUND = "TargetNotFound"
"""Route ``RolloutRestarted=False``, and a Warning Event: a target does not exist; retried with
backoff, the others are rolled out."""
REASON_RESTART_FAILED = "RestartFailed"
"""Route ``RolloutRestarted=False``, and a Warning Event: the API server refused a target's patch
(RBAC, validation); retried with backoff."""
REASON_RESTART_NOT_PERMITTED = "RestartNotPermitted"
"""Route ``RolloutRestarted=False``, and a Warning Event: a target has not opted in (its pod
template lacks the annotation ``config-hash.rotator.dev/<route>``); retried with backoff, the
others are rolled out."""
REASON_MALFORMED_ANNOTATION = "MalformedAnnotation"
"""Policy Warning Event: an annotation rotator wrote on the derived Secret no longer parses (edited
by hand); it is ignored and the derived Secret rewritten."""
REASON_UNTRUSTED_SPEC_HASH = "UntrustedSpecHash"
"""Policy Normal Event (and the refresh reason ``spec hash untrusted``): the derived Secret's
``rotator.dev/spec-hash`` was recorded in a form that cannot say what the credential was minted
for (rotator before 0d4801b hashed no credential block for APIKey, AWS and GCP policies), so the
credential is minted again, once, on purpose (``spechash.Verdict.UNTRUSTED``)."""
REASON_AS_SPECIFIED = "AsSpecified"
"""Policy ``RenewBeforeHonored=True``: the refresh time follows ``spec.rotation`` or the default."""
REASON_RENEW_BEFORE_TOO_LONG = "RenewBeforeTooLong"
"""Policy ``RenewBeforeHonored=False``, and the Warning Event recorded when it turns so: the
message names the field, its value, the credential's lifetime and the refresh time used."""

REASON_CONTROLLER_IDENTITY_NOT_ALLOWED = "ControllerIdentityNotAllowed"
"""Policy ``Ready=False``, and a Warning Event: the policy asks for the controller's own cloud
identity (``controllerIdentity``) in a namespace the controller's
``--controller-identity-namespaces`` does not list; no provider is called
(``credentialsources.controller_identity_refusal``)."""

# A provider's own reasons (``AssumeRoleFailed``, ``ControllerIdentityNotFound``, …) are written
# once, on its errors in rotator/ (rotator.providers.aws.sts, rotator.providers.aws.identity),
# and reach the conditions through the error; docs/api.md lists them.
REASON_ASSUME_ROLE_FAILED = sts.ASSUME_ROLE_FAILED
"""Policy ``Ready=False`` (or ``RotationFailed``'s message): the ``assumeRole`` link of an AWS
role chain failed — the message says ``assumeRole <role ARN>: …`` and the provider's code. A
failure of the chain's base keeps the base's reasons (:mod:`rotator.providers.aws.sts`, where
the value is written)."""

# --- the policy reconciler's own condition and Event reasons (controllers/reconcilers/policy) ---
REASON_ACCEPTED = "Accepted"
"""``Accepted=True`` of every object whose spec rotator can act on (``conditions.accepted``)."""
REASON_CREDENTIALS_READY = "CredentialsReady"
"""Policy ``Ready=True``: the credentials are in the derived Secret (and until when)."""
REASON_ROTATION_FAILED = errors.CredentialError.reason
"""``RotationFailed``, written once as the reason of :class:`rotator.errors.CredentialError`.
Policy ``Ready=True`` while the served credentials are still valid and the last refresh failed
(the message says why, and when it is retried); also the Warning Event of the first such
failure, and the reason of a failure whose error names no reason of its own."""
REASON_EXPIRED = "Expired"
"""Policy ``Ready=False``: the served credentials expired while every refresh failed."""
REASON_CREDENTIALS_ROTATED = "CredentialsRotated"
"""Policy Normal Event: new credentials replaced the served ones in the derived Secret."""
REASON_FORBIDDEN = "Forbidden"
"""Policy ``Ready=False``: the controller's RBAC does not let it write the derived Secret."""
REASON_RELEASE_FAILED = "ReleaseFailed"
"""Policy ``Ready=False`` while being deleted: its external credentials (an IAM key) could not
be given back; the finalizer stays until they are, or :data:`SKIP_RELEASE_ANNOTATION`."""
REASON_RELEASE_SKIPPED = "ReleaseSkipped"
"""Policy Warning Event: deleted with :data:`SKIP_RELEASE_ANNOTATION`, its external credentials
were not given back."""
REASON_SECRET_NOT_FOUND = "SecretNotFound"  # noqa: S105 - a reason, not a password
"""Policy ``Ready=False``: a Secret the spec references does not exist in its namespace."""
REASON_UNSUPPORTED_CREDENTIAL_SOURCE = "UnsupportedCredentialSource"
"""Policy ``Accepted=False`` and ``Ready=False``: the spec is valid, but this build of rotator
cannot obtain a credential from that source."""
# --- end of the policy reconciler's reasons ---------------------------------------------------

# --- the backend and route reconcilers' condition reasons (backend/, route/) -----------------
REASON_RESOLVED_REFS = "ResolvedRefs"
"""Backend ``ResolvedRefs=True``: exactly one policy targets it and it is Ready. Route
``ResolvedRefs=True``: every backend and its credentials resolved."""
REASON_NO_POLICY = "NoPolicy"
"""Backend ``ResolvedRefs=True``: no policy targets it; it is called without credentials."""
REASON_POLICY_CONFLICT = "PolicyConflict"
"""Backend (and Route) ``ResolvedRefs=False``: two or more policies target the backend."""
REASON_POLICY_NOT_READY = "PolicyNotReady"
"""Backend (and Route) ``ResolvedRefs=False``: the backend's policy is not Ready (for a Route
also: its derived Secret is not written yet)."""
REASON_BACKEND_NOT_FOUND = "BackendNotFound"
"""Route ``ResolvedRefs=False``: a referenced ServiceBackend does not exist or is being deleted."""
REASON_CREDENTIALS_EXPIRED = "CredentialsExpired"
"""Route ``ResolvedRefs=False``: a backend's credentials have expired; it is left out."""
REASON_PROGRAMMED = "Programmed"
"""Route ``Programmed=True``: the configuration is in its config Secret."""
# --- end of the backend and route reasons ----------------------------------------------------
