"""The rotator.dev/v1alpha1 API as the reconcilers read it, and the names users depend on.

The CRD YAML in ``config/crd/bases`` is the source of truth for validation, defaults and CEL
rules: they are written and reviewed as YAML, the form ``kubectl explain`` and users see, and
generating them from Python would mean writing our own controller-gen. These TypedDicts are the
typed view of the same objects; ``tests/unit/test_api_schema.py`` walks the CRD schemas and fails
when a property exists on one side only, so the two cannot drift.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from controllers.runtime.objects import ObjectMeta, Resource

GROUP = "rotator.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

POLICIES = Resource(GROUP, VERSION, "backendsecuritypolicies", "BackendSecurityPolicy")
BACKENDS = Resource(GROUP, VERSION, "servicebackends", "ServiceBackend")
ROUTES = Resource(GROUP, VERSION, "routes", "Route")

# --- contracts (DESIGN §3) ---------------------------------------------------------------------

FIELD_MANAGER = "rotator"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "rotator"
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
EXPIRATION_ANNOTATION = "rotator.dev/expiration-time"
CREDENTIAL_HASH_ANNOTATION = "rotator.dev/credential-hash"
CONFIG_HASH_ANNOTATION = "rotator.dev/config-hash"
ROTATE_REQUESTED_ANNOTATION = "rotator.dev/rotate-requested-at"
ROUTE_CONFIG_KEY = "config.yaml"

# Also on the derived Secret, for minted credentials: what rotator needs to decide, after a
# restart and from the cache alone, whether the served credential is still the right one.
ISSUED_AT_ANNOTATION = "rotator.dev/issued-at"
SPEC_HASH_ANNOTATION = "rotator.dev/spec-hash"
"""Hash of the credential part of the spec the credential was minted for."""
ANSWERED_REQUEST_ANNOTATION = "rotator.dev/answered-rotate-request"
"""The ``rotate-requested-at`` value the credential was minted in answer to."""
STATE_ANNOTATION_PREFIX = "state.rotator.dev/"
"""Provider state (e.g. an IAM key still retiring), one annotation per key."""
FINALIZER_IAM_KEY = "rotator.dev/iam-access-key"


def derived_secret_name(policy_name: str) -> str:
    return f"rotator-bsp-{policy_name}"


def route_config_secret_name(route_name: str) -> str:
    return f"rotator-route-{route_name}"


PolicyType = Literal["APIKey", "AWSCredentials", "GCPCredentials", "AzureCredentials"]


class SecretRef(TypedDict):
    name: str
    key: str


class TargetRef(TypedDict):
    group: str
    kind: str
    name: str


class APIKeySpec(TypedDict):
    secretRef: SecretRef


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


class AWSCredentialsSpec(TypedDict):
    region: str
    credentialsFile: NotRequired[AWSCredentialsFile]
    oidcExchangeToken: NotRequired[AWSOIDCExchangeToken]
    serviceAccountToken: NotRequired[AWSServiceAccountToken]
    iamAccessKey: NotRequired[AWSIAMAccessKey]


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


class GCPCredentialsSpec(TypedDict):
    projectName: str
    region: str
    credentialsFile: NotRequired[GCPCredentialsFile]
    workloadIdentityFederation: NotRequired[GCPWorkloadIdentityFederation]


class AzureServiceAccountToken(TypedDict):
    serviceAccountName: str
    audience: str


class AzureCredentialsSpec(TypedDict):
    clientID: str
    tenantID: str
    scope: str
    clientSecretRef: NotRequired[SecretRef]
    oidcExchangeToken: NotRequired[OIDCExchangeToken]
    serviceAccountToken: NotRequired[AzureServiceAccountToken]


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


class RouteSpec(TypedDict):
    rules: list[Rule]


class Route(TypedDict):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: RouteSpec
    status: NotRequired[ConditionsStatus]
