"""The rotator.dev/v1alpha1 objects as the reconcilers read them: TypedDicts of the CRDs, and
what a field means when absent. Part of :mod:`controllers.reconcilers.api`, which re-exports it.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from controllers.runtime.objects import ObjectMeta

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


OutputFormat = Literal["rotator.dev/v1alpha1", "LiteLLM", "Envoy"]
DEFAULT_OUTPUT_FORMAT: OutputFormat = "rotator.dev/v1alpha1"
"""``spec.output.format`` when absent: rotator's own format (route/formats/own.py), so Routes
written before the field existed keep their configuration's bytes and hash."""


class EnvoyOutput(TypedDict, total=False):
    """``spec.output.envoy``: where an Envoy format's listener binds (route/formats/envoy.py)."""

    address: str
    port: int


class OutputSpec(TypedDict, total=False):
    format: OutputFormat
    envoy: EnvoyOutput


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
