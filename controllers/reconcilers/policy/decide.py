"""Whether a policy's credential must be replaced now, and why: the one place a refresh reason is
decided (cert-manager's ``trigger/policies``: a chain of small named checks, the first that
speaks wins).

A minted credential is replaced only when a check of :data:`MINTED_CHECKS` says so; a copied one
is copied again on every reconcile (:attr:`RefreshReason.COPY`) unless :func:`copy_is_current`
vouches for it. Everything a check reads is in :class:`Inputs` — the policy, what the derived
Secret serves, the source's answers and the controller-identity rule's verdict — so the
decision needs no API call and is the same after a restart.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from controllers.reconcilers import api, derived, spechash
from controllers.reconcilers.credentialsources import (
    ControllerIdentityNotAllowed,
    CredentialSource,
    SourceContext,
)
from controllers.runtime import objects


class RefreshReason(enum.Enum):
    """Why a new credential is obtained now; the value is what the logs say (``why``)."""

    MISSING = "missing"
    EDITED = "edited"
    SPEC_CHANGED = "spec changed"
    UNTRUSTED_SPEC_HASH = "spec hash untrusted"
    """The recorded spec hash cannot say what the credential was minted for
    (:attr:`spechash.Verdict.UNTRUSTED`): minted again on purpose, and said so
    (:data:`api.REASON_UNTRUSTED_SPEC_HASH`)."""
    ROTATION_REQUESTED = "rotation requested"
    CONTROLLER_IDENTITY_NOT_ALLOWED = "controller identity not allowed"
    """The spec wears the controller's identity in a namespace the flag no longer lists: due at
    once, and refused before any provider call (the served credential is never renewed)."""
    DUE = "due"
    COPY = "copy"
    """A copied credential, derived again from its Secrets."""

    @property
    def forced(self) -> bool:
        """Whether a new credential is wanted before its time (``SourceContext.forced``)."""
        return self not in _UNFORCED

    @property
    def mints(self) -> bool:
        """Whether the refresh calls the provider (every reason but a copy's)."""
        return self is not RefreshReason.COPY


_UNFORCED = frozenset(
    {RefreshReason.DUE, RefreshReason.COPY, RefreshReason.CONTROLLER_IDENTITY_NOT_ALLOWED}
)


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` found: a reason to refresh, or None to keep what is served."""

    reason: RefreshReason | None
    message: str


@dataclass(frozen=True)
class Inputs:
    """Everything a check reads."""

    policy: api.Policy
    served: derived.Served | None
    source: CredentialSource
    ctx: SourceContext
    refusal: ControllerIdentityNotAllowed | None = None
    """The controller-identity rule's verdict on this policy (None: allowed, or not asked)."""
    cached_version: Callable[[str], str | None] = lambda name: None
    """A source Secret's resourceVersion as the metadata cache shows it (None: not there)."""


Check = Callable[[Inputs], Decision | None]


def missing(i: Inputs) -> Decision | None:
    if i.served is None:
        return Decision(RefreshReason.MISSING, "no derived Secret serves a credential")
    return None


def edited(i: Inputs) -> Decision | None:
    """Its data, or an annotation that no longer parses."""
    if i.served is not None and (not i.served.intact or i.served.malformed):
        return Decision(RefreshReason.EDITED, "the derived Secret was edited")
    return None


def spec_changed(i: Inputs) -> Decision | None:
    """What the recorded spec hash says of the spec as it is (CURRENT: nothing to say)."""
    recorded = i.served.spec_hash if i.served is not None else None
    verdict = spechash.judge(recorded, i.policy["spec"])
    if verdict is spechash.Verdict.CHANGED:
        return Decision(RefreshReason.SPEC_CHANGED, "the credential spec changed")
    if verdict is spechash.Verdict.UNTRUSTED:
        return Decision(
            RefreshReason.UNTRUSTED_SPEC_HASH,
            f"its {api.SPEC_HASH_ANNOTATION} ({recorded}) cannot say what it was minted for",
        )
    return None


def rotation_requested(i: Inputs) -> Decision | None:
    """A ``rotate-requested-at`` value the served credential does not answer yet."""
    requested = (objects.meta(i.policy).get("annotations") or {}).get(
        api.ROTATE_REQUESTED_ANNOTATION
    )
    answered = i.served.answered_request if i.served is not None else None
    if requested and requested != answered:
        return Decision(RefreshReason.ROTATION_REQUESTED, f"rotation requested at {requested}")
    return None


def controller_identity_not_allowed(i: Inputs) -> Decision | None:
    if i.refusal is not None:
        return Decision(RefreshReason.CONTROLLER_IDENTITY_NOT_ALLOWED, str(i.refusal))
    return None


def due(i: Inputs) -> Decision | None:
    when = due_at(i.source, i.ctx)
    if when is not None and i.ctx.now >= when:
        return Decision(RefreshReason.DUE, "its renewal time came")
    return None


MINTED_CHECKS: tuple[Check, ...] = (
    missing,
    edited,
    spec_changed,
    rotation_requested,
    controller_identity_not_allowed,
    due,
)
"""The chain for a minted credential, in order: the first that speaks wins."""

KEEP = Decision(None, "the served credential is current")


def decide(i: Inputs, checks: Sequence[Check] = MINTED_CHECKS) -> Decision:
    """Why the credential is replaced now; :data:`KEEP` (reason None) to keep serving it."""
    if not i.source.calls_provider(i.policy["spec"]):
        if copy_is_current(i):
            return KEEP
        return Decision(RefreshReason.COPY, "a copy is derived from its Secrets")
    for check in checks:
        if (decision := check(i)) is not None:
            return decision
    return KEEP


def copy_is_current(i: Inputs) -> bool:
    """Whether the served copy is intact and was copied for this spec (neither :func:`edited`
    nor :func:`spec_changed` says otherwise), and from the versions of its source Secrets that
    the metadata cache shows now (``rotator.dev/source-version``). A derived Secret written
    before the annotation existed has none: read once, annotated."""
    served = i.served
    if served is None or served.source_version is None:
        return False
    if edited(i) is not None or spec_changed(i) is not None:  # the checks of a refresh
        return False
    versions = []
    for name in source_names(i.source, i.policy):
        version = i.cached_version(name)
        if version is None:
            return False  # gone: the copy path says SecretNotFound, without a read
        versions.append(version)
    return bool(versions) and derived.recorded_versions(
        served.source_version
    ) == derived.source_version(versions)


def due_at(source: CredentialSource, ctx: SourceContext) -> float | None:
    """The source's due time in whole seconds (rounded down: never later), as status shows it."""
    when = source.due_at(ctx)
    return None if when is None else float(math.floor(when))


def source_names(source: CredentialSource, policy: api.Policy) -> list[str]:
    """The Secrets a policy's source reads, each once, in the order its spec names them."""
    return list(dict.fromkeys(ref["name"] for ref in source.secret_refs(policy["spec"])))
