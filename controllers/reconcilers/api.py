"""The rotator.dev/v1alpha1 API as the reconcilers read it, and the names users depend on.

The CRD YAML in ``config/crd/bases`` is the source of truth for validation, defaults and CEL
rules: they are written and reviewed as YAML, the form ``kubectl explain`` and users see, and
generating them from Python would mean writing our own controller-gen. These TypedDicts are the
typed view of the same objects; ``tests/unit/test_api_schema.py`` walks the CRD schemas and fails
when a property exists on one side only, so the two cannot drift.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal, NotRequired, TypedDict

from controllers.runtime.objects import ObjectMeta, Resource
from rotator import errors
from rotator.providers.aws import sts

GROUP = "rotator.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

POLICIES = Resource(GROUP, VERSION, "backendsecuritypolicies", "BackendSecurityPolicy")
BACKENDS = Resource(GROUP, VERSION, "servicebackends", "ServiceBackend")
ROUTES = Resource(GROUP, VERSION, "routes", "Route")

# --- contracts (documented in docs/api.md) -----------------------------------------------------

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


# --- condition reasons and Event reasons users see (besides those of rotator.errors) -----------

REASON_INVALID_CREDENTIALS = "InvalidCredentials"
"""Route ``ResolvedRefs``: a backend's derived credentials cannot be put into the configuration
(not UTF-8 text, or an unreadable expiry); the backend is left out."""
REASON_CONFIG_TOO_LARGE = "ConfigTooLarge"
"""Route ``Programmed=False``: the configuration exceeds what a Secret can hold; the previous one
stays in place, stale."""
REASON_CONFIG_REJECTED = "ConfigRejected"
"""Route ``Programmed=False``: the API server refused the configuration Secret as invalid."""
TRANSLATED = "Translated"
"""Route condition, on Routes whose ``spec.output.format`` is ``LiteLLM``: does the configuration
hold every rule, match and backend of the spec that rotator itself could reach (rules after a
catch-all are not: rotator never routes to them either)? False (:data:`REASON_NOT_EXPRESSIBLE`)
names each rule and backend LiteLLM cannot express, and what (controllers/reconcilers/
route/formats/litellm.py)."""
REASON_NOT_EXPRESSIBLE = "NotExpressible"
"""Route ``Translated=False``: part of the spec is left out of a LiteLLM configuration."""
REASON_TRANSLATED = "Translated"
"""Route ``Translated=True``: the LiteLLM configuration holds every reachable rule of the spec."""
ROLLOUT_RESTARTED = "RolloutRestarted"
"""Route condition, on Routes with ``spec.rolloutRestartTargets``: were the targets rolled out
for the configuration in the config Secret (controllers/reconcilers/route/restarts.py)?"""
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
ROLLOUT_ANNOTATION_PREFIX = "config-hash.rotator.dev/"
"""On the pod template of a Route's ``rolloutRestartTargets``, followed by the Route's name: the
hash of the configuration the workload was rolled out for (restarts.template_annotation). Its
owner adds it first (any value): without it rotator does not roll the workload out."""
REASON_MALFORMED_ANNOTATION = "MalformedAnnotation"
"""Policy Warning Event: an annotation rotator wrote on the derived Secret no longer parses (edited
by hand); it is ignored and the derived Secret rewritten."""
REASON_UNTRUSTED_SPEC_HASH = "UntrustedSpecHash"
"""Policy Normal Event (and the refresh reason ``spec hash untrusted``): the derived Secret's
``rotator.dev/spec-hash`` was recorded in a form that cannot say what the credential was minted
for (rotator before 0d4801b hashed no credential block for APIKey, AWS and GCP policies), so the
credential is minted again, once, on purpose (``spechash.Verdict.UNTRUSTED``)."""

RENEW_BEFORE_HONORED = "RenewBeforeHonored"
"""Policy condition, on policies whose credentials expire: is the refresh time the one
``spec.rotation`` asks for? True (:data:`REASON_AS_SPECIFIED`) when it is, or when the default
applies. False (:data:`REASON_RENEW_BEFORE_TOO_LONG`) when ``renewBefore`` or
``renewBeforePercentage`` would refresh earlier than the renewal floor (1/10 of the lifetime,
and 5 s, after issue: ``rotator.schedule.renewal_floor``), so the floor is used instead.
Positive polarity, as every rotator condition (docs/api.md): a clamped policy still works, so
``Ready`` stays True, its message saying so as well."""
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
# --- end of the backend and route reasons (restarts.py's are above: REASON_RESTARTED …) -------

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
    if len(name) <= NAME_PART_MAX and _NAME_PART.match(name):
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


PolicyType = Literal["APIKey", "AWSCredentials", "GCPCredentials", "AzureCredentials"]

CREDENTIAL_BLOCKS: dict[str, str] = {
    "APIKey": "apiKey",
    "AWSCredentials": "awsCredentials",
    "GCPCredentials": "gcpCredentials",
    "AzureCredentials": "azureCredentials",
}
"""Policy ``type`` → the spec field that holds its credential block."""

CREDENTIAL_DEFAULTS: dict[str, dict[str, Any]] = {
    "apiKey": {"secretRef": {"key": "apiKey"}, "header": "Authorization"},
    "awsCredentials": {
        "credentialsFile": {"secretRef": {"key": "credentials"}, "profile": "default"},
        "oidcExchangeToken": {
            "oidc": {"clientSecretRef": {"key": "client-secret"}},
            "sessionDuration": "1h",
        },
        "serviceAccountToken": {"audience": "sts.amazonaws.com", "sessionDuration": "1h"},
        "iamAccessKey": {"secretRef": {"key": "credentials"}, "rotationInterval": "24h"},
        "assumeRole": {"sessionDuration": "1h"},
    },
    "gcpCredentials": {
        "credentialsFile": {"secretRef": {"key": "service_account.json"}},
        "workloadIdentityFederation": {
            "oidcExchangeToken": {"oidc": {"clientSecretRef": {"key": "client-secret"}}}
        },
    },
    "azureCredentials": {
        "scope": "https://cognitiveservices.azure.com/.default",
        "clientSecretRef": {"key": "client-secret"},
        "oidcExchangeToken": {"oidc": {"clientSecretRef": {"key": "client-secret"}}},
        "serviceAccountToken": {"audience": "api://AzureADTokenExchange"},
    },
}
"""Credential block → what each of its fields means when absent: the CRD's defaults (a field
whose value is a dict holds the defaults of an object field's own fields), and any optional
field whose absence means a value without the CRD writing it. ``spechash`` hashes a field at
this value as if absent, so a CRD that gains a default, or a new optional field left at its
default, changes no hash. ``tests/unit/test_spec_hash.py`` checks every default in the CRD is
here with the same value."""


class SecretRef(TypedDict):
    name: str
    key: str


class TargetRef(TypedDict):
    group: str
    kind: str
    name: str


APIKeyHeader = Literal["Authorization", "api-key", "x-api-key"]
"""``spec.apiKey.header``: the HTTP header a gateway sends the key in (docs/api.md, "Route config
Secret"). The values are header names, so the route configuration can state them as they are."""
DEFAULT_API_KEY_HEADER: APIKeyHeader = "Authorization"
"""The CRD's default, and the only behaviour before the field existed: ``Authorization: Bearer``."""


class APIKeySpec(TypedDict):
    secretRef: SecretRef
    header: NotRequired[APIKeyHeader]


class OIDC(TypedDict):
    issuer: str
    clientID: str
    clientSecretRef: SecretRef
    scopes: NotRequired[list[str]]
    audience: NotRequired[str]


class AWSCredentialsFile(TypedDict):
    secretRef: SecretRef
    profile: str


class AWSOIDCExchangeToken(TypedDict):
    oidc: OIDC
    awsRoleArn: str
    sessionDuration: str


class AWSServiceAccountToken(TypedDict):
    serviceAccountName: str
    audience: str
    awsRoleArn: str
    sessionDuration: str


class AWSIAMAccessKey(TypedDict):
    userName: str
    secretRef: SecretRef
    rotationInterval: str


class AWSControllerIdentity(TypedDict):
    """``controllerIdentity: {}``: no fields; its presence picks the source."""


class AWSAssumeRole(TypedDict):
    roleArn: str
    externalID: NotRequired[str]
    sessionName: NotRequired[str]
    sessionDuration: str


class AWSCredentialsSpec(TypedDict):
    region: str
    credentialsFile: NotRequired[AWSCredentialsFile]
    oidcExchangeToken: NotRequired[AWSOIDCExchangeToken]
    serviceAccountToken: NotRequired[AWSServiceAccountToken]
    iamAccessKey: NotRequired[AWSIAMAccessKey]
    controllerIdentity: NotRequired[AWSControllerIdentity]
    assumeRole: NotRequired[AWSAssumeRole]


class GCPCredentialsFile(TypedDict):
    secretRef: SecretRef


class OIDCExchangeToken(TypedDict):
    oidc: OIDC


class GCPServiceAccountToken(TypedDict):
    serviceAccountName: str
    audience: NotRequired[str]


class GCPServiceAccountImpersonation(TypedDict):
    serviceAccountName: str


class GCPWorkloadIdentityFederation(TypedDict):
    projectID: str
    workloadIdentityPoolName: str
    workloadIdentityProviderName: str
    oidcExchangeToken: NotRequired[OIDCExchangeToken]
    serviceAccountToken: NotRequired[GCPServiceAccountToken]
    serviceAccountImpersonation: NotRequired[GCPServiceAccountImpersonation]


class GCPControllerIdentity(TypedDict, total=False):
    """The controller's own Application Default Credentials; ``serviceAccount``: impersonate it."""

    serviceAccount: str


class GCPCredentialsSpec(TypedDict):
    projectName: str
    region: str
    credentialsFile: NotRequired[GCPCredentialsFile]
    workloadIdentityFederation: NotRequired[GCPWorkloadIdentityFederation]
    controllerIdentity: NotRequired[GCPControllerIdentity]


class AzureServiceAccountToken(TypedDict):
    serviceAccountName: str
    audience: str


class AzureControllerIdentity(TypedDict, total=False):
    """The controller's own managed or workload identity; ``clientID``: a user-assigned one."""

    clientID: str


class AzureCredentialsSpec(TypedDict):
    clientID: NotRequired[str]
    """Required by every source but ``controllerIdentity`` (a CEL rule of the CRD)."""
    tenantID: NotRequired[str]
    """Required by every source but ``controllerIdentity`` (a CEL rule of the CRD)."""
    scope: str
    clientSecretRef: NotRequired[SecretRef]
    oidcExchangeToken: NotRequired[OIDCExchangeToken]
    serviceAccountToken: NotRequired[AzureServiceAccountToken]
    controllerIdentity: NotRequired[AzureControllerIdentity]


class RotationSpec(TypedDict, total=False):
    renewBefore: str
    renewBeforePercentage: int
    jitter: int


class PolicySpec(TypedDict):
    type: PolicyType
    targetRefs: NotRequired[list[TargetRef]]
    apiKey: NotRequired[APIKeySpec]
    awsCredentials: NotRequired[AWSCredentialsSpec]
    gcpCredentials: NotRequired[GCPCredentialsSpec]
    azureCredentials: NotRequired[AzureCredentialsSpec]
    rotation: NotRequired[RotationSpec]


class Condition(TypedDict):
    type: str
    status: Literal["True", "False", "Unknown"]
    observedGeneration: int
    lastTransitionTime: str
    reason: str
    message: str


class PolicyStatus(TypedDict, total=False):
    conditions: list[Condition]
    expirationTime: str
    renewalTime: str
    lastRotationTime: str
    failedAttempts: int
    lastFailureTime: str
    derivedSecretName: str


class Policy(TypedDict):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: PolicySpec
    status: NotRequired[PolicyStatus]


class TLS(TypedDict, total=False):
    enabled: bool
    sni: str


class Endpoint(TypedDict):
    host: str
    port: int
    tls: NotRequired[TLS]


class BackendSpec(TypedDict):
    schema: str
    endpoint: Endpoint


class ConditionsStatus(TypedDict, total=False):
    conditions: list[Condition]


class Backend(TypedDict):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: BackendSpec
    status: NotRequired[ConditionsStatus]


class Match(TypedDict, total=False):
    modelName: str
    pathPrefix: str


class BackendRef(TypedDict):
    name: str
    weight: int
    priority: int


class Rule(TypedDict):
    backendRefs: list[BackendRef]
    matches: NotRequired[list[Match]]


RolloutKind = Literal["Deployment", "StatefulSet", "DaemonSet"]


class RolloutRestartTarget(TypedDict):
    kind: RolloutKind
    name: str


OutputFormat = Literal["rotator.dev/v1alpha1", "LiteLLM"]
DEFAULT_OUTPUT_FORMAT: OutputFormat = "rotator.dev/v1alpha1"
"""``spec.output.format`` when absent: rotator's own format (route/formats/own.py), so Routes
written before the field existed keep their configuration's bytes and hash."""


class OutputSpec(TypedDict, total=False):
    format: OutputFormat


class RouteSpec(TypedDict):
    rules: list[Rule]
    rolloutRestartTargets: NotRequired[list[RolloutRestartTarget]]
    output: NotRequired[OutputSpec]


class RolloutRestartStatus(TypedDict):
    configHash: str
    lastRestartTime: NotRequired[str]


class RouteStatus(TypedDict, total=False):
    conditions: list[Condition]
    rolloutRestart: RolloutRestartStatus


class Route(TypedDict):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: RouteSpec
    status: NotRequired[RouteStatus]
