"""The names of the rotator.dev/v1alpha1 API that users depend on (documented in docs/api.md):
group and resources, condition types, labels, annotations, finalizers, and the names of the
Secrets rotator writes. Part of :mod:`controllers.reconcilers.api`, which re-exports it."""

from __future__ import annotations

import hashlib
import re

from controllers.runtime.objects import Resource

GROUP = "rotator.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

POLICIES = Resource(GROUP, VERSION, "backendsecuritypolicies", "BackendSecurityPolicy")
BACKENDS = Resource(GROUP, VERSION, "servicebackends", "ServiceBackend")
ROUTES = Resource(GROUP, VERSION, "routes", "Route")

# Condition types (positive polarity, as Gateway API's): every object has Accepted; policies
# Ready; backends ResolvedRefs; routes ResolvedRefs and Programmed.
ACCEPTED = "Accepted"
READY = "Ready"
RESOLVED_REFS = "ResolvedRefs"
PROGRAMMED = "Programmed"

FIELD_MANAGER = "rotator"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "rotator"
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
EXPIRATION_ANNOTATION = "rotator.dev/expiration-time"
CREDENTIAL_HASH_ANNOTATION = "rotator.dev/credential-hash"
CONFIG_HASH_ANNOTATION = "rotator.dev/config-hash"
CONFIG_INPUTS_ANNOTATION = "rotator.dev/config-inputs"
"""On the route config Secret: a hash binding what its configuration was rendered from (its
format's ``inputs_hash``, controllers/reconcilers/route/formats) to the data and
``config-hash`` written with it (route/configsecret.py). While a Route's inputs hash the same
and the Secret still matches, the Route is not rendered again (a restart renders nothing).
Written with each new configuration, never alone: without it, or with a wrong one, the Route is
rendered as before. Not an authentication: whoever may write that Secret may also write the
Route's inputs."""
ROTATE_REQUESTED_ANNOTATION = "rotator.dev/rotate-requested-at"
ROUTE_CONFIG_KEY = "config.yaml"

# Also on the derived Secret: what rotator needs to decide, after a restart and from the cache
# alone, whether the served credential is still the right one.
ISSUED_AT_ANNOTATION = "rotator.dev/issued-at"
SPEC_HASH_ANNOTATION = "rotator.dev/spec-hash"
"""Hash of the credential part of the spec the credential was minted (or copied) for."""
SOURCE_VERSION_ANNOTATION = "rotator.dev/source-version"
"""On a copied credential (API key, AWS credentials file): the resourceVersion of each Secret it
was copied from, comma-separated in the order the spec names them (earlier versions wrote
``<uid>/<resourceVersion>`` each; still read). While the metadata cache shows the same versions
the copy is current, and the source is not read again."""
ANSWERED_REQUEST_ANNOTATION = "rotator.dev/answered-rotate-request"
"""The ``rotate-requested-at`` value the credential was minted in answer to."""
STATE_ANNOTATION_PREFIX = "state.rotator.dev/"
"""Provider state (e.g. an IAM key still retiring), one annotation per key."""
STATE_TIME_SUFFIX = "-at"
"""A state key ending so holds a time in Unix seconds (``previous-key-retires-at``): the
controller checks it on read, so a hand-edited value is reported instead of reaching a
provider."""
FINALIZER_IAM_KEY = "rotator.dev/iam-access-key"
IN_USE_FINALIZER_PREFIX = "rotator.dev/in-use-by-"
"""On a Secret a policy needs to give back its external credentials (the IAM management
identity), followed by the policy's uid: the Secret outlives the policy's release, whatever the
order of deletion (``kubernetes.io/pvc-protection``'s habit). One per policy, so that policies
sharing a Secret release it independently."""
SKIP_RELEASE_ANNOTATION = "rotator.dev/skip-release"
"""``"true"`` on a policy being deleted whose release keeps failing: rotator removes its
finalizer without giving back the external credentials (they are named in an Event), the escape
hatch when, say, the management identity was revoked."""


def in_use_finalizer(policy_uid: str) -> str:
    return IN_USE_FINALIZER_PREFIX + policy_uid


TRANSLATED = "Translated"
"""Route condition, on Routes whose ``spec.output.format`` is ``LiteLLM`` or ``Envoy``: does the
configuration hold every rule, match and backend of the spec that rotator itself could reach
(rules after a catch-all are not: rotator never routes to them either)? False
(:data:`REASON_NOT_EXPRESSIBLE`) names each rule and backend the format cannot express, and what
(controllers/reconcilers/route/formats/litellm.py and envoy.py)."""
ROLLOUT_RESTARTED = "RolloutRestarted"
"""Route condition, on Routes with ``spec.rolloutRestartTargets``: were the targets rolled out
for the configuration in the config Secret (controllers/reconcilers/route/restarts.py)?"""
ROLLOUT_ANNOTATION_PREFIX = "config-hash.rotator.dev/"
"""On the pod template of a Route's ``rolloutRestartTargets``, followed by the Route's name: the
hash of the configuration the workload was rolled out for (restarts.template_annotation). Its
owner adds it first (any value): without it rotator does not roll the workload out."""

RENEW_BEFORE_HONORED = "RenewBeforeHonored"
"""Policy condition, on policies whose credentials expire: is the refresh time the one
``spec.rotation`` asks for? True (:data:`REASON_AS_SPECIFIED`) when it is, or when the default
applies. False (:data:`REASON_RENEW_BEFORE_TOO_LONG`) when ``renewBefore`` or
``renewBeforePercentage`` would refresh earlier than the renewal floor (1/10 of the lifetime,
and 5 s, after issue: ``rotator.schedule.renewal_floor``), so the floor is used instead.
Positive polarity, as every rotator condition (docs/api.md): a clamped policy still works, so
``Ready`` stays True, its message saying so as well."""
ALLOWED_POLICIES_ANNOTATION = "rotator.dev/allowed-policies"
"""On a ServiceAccount: the policies of its namespace that may mint tokens for it — a
comma-separated list of names, or ``*`` for all. Without it rotator mints no token for the
ServiceAccount (IRSA's ``eks.amazonaws.com/role-arn`` habit: the identity opts in)."""
POLICY_LABEL = "rotator.dev/policy"
ROUTE_LABEL = "rotator.dev/route"
"""Labels on the Secrets rotator writes: the owner's name, or ``sha256-<hash>`` when the name is
not a valid label value (over 63 characters); the name is then in :data:`OWNER_NAME_ANNOTATION`."""
OWNER_NAME_ANNOTATION = "rotator.dev/owner-name"


NAME_PART_MAX = 63
"""Characters of a label value, and of an annotation key's name part."""
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def fit_name(name: str) -> str:
    """``name`` where a label value or an annotation key's name part must fit: itself when it is
    one (1 to :data:`NAME_PART_MAX` characters of ``[A-Za-z0-9._-]``, alphanumeric at both
    ends), else ``sha256-<first 40 hex digits of its hash>`` (still unique in practice, and
    always the same for the same name). The one rule for both: an empty name is not one, so it
    is hashed too (object names are never empty)."""
    if len(name) <= NAME_PART_MAX and _NAME_PART.fullmatch(name):  # $ would pass "a\n"
        return name
    return f"sha256-{hashlib.sha256(name.encode()).hexdigest()[:40]}"


def owner_labels(label: str, owner_name: str) -> tuple[dict[str, str], dict[str, str]]:
    """``(labels, annotations)`` naming the owner of a Secret rotator writes.

    Object names run to 253 characters, label values to 63: a name that does not fit is labelled
    :func:`fit_name` (still selectable, still unique in practice) and carried whole in the
    :data:`OWNER_NAME_ANNOTATION`.
    """
    value = fit_name(owner_name)
    return {label: value}, ({} if value == owner_name else {OWNER_NAME_ANNOTATION: owner_name})


def derived_secret_name(policy_name: str) -> str:
    return f"rotator-bsp-{policy_name}"


def route_config_secret_name(route_name: str) -> str:
    return f"rotator-route-{route_name}"
