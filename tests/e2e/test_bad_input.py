"""Bad input: the API server rejects invalid specs with the CEL message; bad referenced Secrets
surface as precise reasons, back off, and recover on their own when fixed."""

from __future__ import annotations

import time
from typing import Any

import pytest

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import errors
from controllers.runtime.objects import Resource
from tests.support import backoff
from tests.support.audit import AuditLog, Request
from tests.support.chain import Chain
from tests.support.polling import wait_for

pytestmark = pytest.mark.oldest_kubernetes

OIDC = {"issuer": "https://idp.example.com", "clientID": "c", "clientSecretRef": {"name": "s"}}
ROLE = "arn:aws:iam::123456789012:role/bedrock"


def create(api: clients.Client, namespace: str, kind: Resource, spec: dict[str, Any]) -> None:
    api.create(
        kind,
        {
            "apiVersion": rapi.API_VERSION,
            "kind": kind.kind,
            "metadata": {"name": "x"},
            "spec": spec,
        },
        namespace=namespace,
    )


INVALID = [
    pytest.param(
        rapi.POLICIES,
        {
            "type": "APIKey",
            "awsCredentials": {
                "region": "us-east-1",
                "credentialsFile": {"secretRef": {"name": "s"}},
            },
        },
        "exactly the credential block named by type must be set",
        id="type-names-its-block",
    ),
    pytest.param(
        rapi.POLICIES,
        {
            "type": "AWSCredentials",
            "awsCredentials": {
                "region": "us-east-1",
                "credentialsFile": {"secretRef": {"name": "s"}},
                "iamAccessKey": {"userName": "u", "secretRef": {"name": "s"}},
            },
        },
        "set exactly one AWS credential source",
        id="one-aws-source",
    ),
    pytest.param(
        rapi.POLICIES,
        {"type": "AWSCredentials", "awsCredentials": {"region": "us-east-1"}},
        "set exactly one AWS credential source",
        id="an-aws-source",
    ),
    pytest.param(
        rapi.POLICIES,
        {"type": "GCPCredentials", "gcpCredentials": {"projectName": "p", "region": "r"}},
        "set exactly one GCP credential source",
        id="one-gcp-source",
    ),
    pytest.param(
        rapi.POLICIES,
        {
            "type": "GCPCredentials",
            "gcpCredentials": {
                "projectName": "p",
                "region": "r",
                "workloadIdentityFederation": {
                    "projectID": "1",
                    "workloadIdentityPoolName": "p",
                    "workloadIdentityProviderName": "q",
                },
            },
        },
        "set exactly one subject token source",
        id="one-subject-token-source",
    ),
    pytest.param(
        rapi.POLICIES,
        {
            "type": "AzureCredentials",
            "azureCredentials": {
                "clientID": "c",
                "tenantID": "t",
                "clientSecretRef": {"name": "s"},
                "oidcExchangeToken": {"oidc": OIDC},
            },
        },
        "set exactly one Azure credential source",
        id="one-azure-source",
    ),
    pytest.param(
        rapi.POLICIES,
        {
            "type": "AWSCredentials",
            "awsCredentials": {
                "region": "us-east-1",
                "oidcExchangeToken": {"oidc": OIDC, "awsRoleArn": ROLE, "sessionDuration": "5m"},
            },
        },
        "sessionDuration must be between 15m and 12h",
        id="session-duration-range",
    ),
    pytest.param(
        rapi.POLICIES,
        {
            "type": "AWSCredentials",
            "awsCredentials": {
                "region": "us-east-1",
                "oidcExchangeToken": {
                    "oidc": OIDC,
                    "awsRoleArn": ROLE,
                    "sessionDuration": "one hour",
                },
            },
        },
        "should match",
        id="durations-parse",
    ),
    pytest.param(
        rapi.POLICIES,
        {
            "type": "AWSCredentials",
            "awsCredentials": {
                "region": "us-east-1",
                "iamAccessKey": {
                    "userName": "u",
                    "secretRef": {"name": "s"},
                    "rotationInterval": "10m",
                },
            },
        },
        "rotationInterval must be at least 1h",
        id="rotation-interval-minimum",
    ),
    pytest.param(
        rapi.POLICIES,
        {
            "type": "APIKey",
            "apiKey": {"secretRef": {"name": "s"}},
            "rotation": {"renewBefore": "10m", "renewBeforePercentage": 20},
        },
        "set renewBefore or renewBeforePercentage, not both",
        id="renew-before-exclusive",
    ),
    pytest.param(
        rapi.POLICIES,
        {
            "type": "APIKey",
            "apiKey": {"secretRef": {"name": "s"}},
            "rotation": {"renewBefore": "0s"},
        },
        "renewBefore must be a positive duration",
        id="renew-before-positive",
    ),
    pytest.param(
        rapi.POLICIES,
        {
            "type": "AWSCredentials",
            "awsCredentials": {
                "region": "us-east-1",
                "oidcExchangeToken": {"oidc": {**OIDC, "issuer": "https://"}, "awsRoleArn": ROLE},
            },
        },
        "issuer must be an http(s) URL with a host",
        id="issuer-is-a-url",
    ),
    pytest.param(
        rapi.POLICIES,
        {
            "type": "APIKey",
            "apiKey": {"secretRef": {"name": "s"}},
            "targetRefs": [{"kind": "Gateway", "name": "g"}],
        },
        'supported values: "ServiceBackend"',
        id="targets-are-service-backends",
    ),
    pytest.param(
        rapi.ROUTES,
        {"rules": [{"matches": [{}], "backendRefs": [{"name": "b"}]}]},
        "a match needs modelName or pathPrefix",
        id="match-needs-a-field",
    ),
    pytest.param(
        rapi.ROUTES,
        {"rules": [{"backendRefs": [{"name": "b", "weight": -1}]}]},
        "weight must be 0 or more",
        id="weights-not-negative",
    ),
]


@pytest.mark.parametrize(("kind", "spec", "message"), INVALID)
def test_invalid_spec_is_rejected_with_a_clear_message(
    api: clients.Client,
    namespace: str,
    installed: None,
    kind: Resource,
    spec: dict[str, Any],
    message: str,
) -> None:
    with pytest.raises(errors.Invalid) as raised:
        create(api, namespace, kind, spec)
    assert message in str(raised.value)


def test_secret_without_the_key_then_fixed(chain: Chain) -> None:
    chain.secret("key", other="sk-not-the-right-key-123")
    chain.api_key_policy("p", secret="key", targets=["b"])
    ready = chain.wait_condition("policy", "p", "Ready", "False", "SecretKeyNotFound")
    assert ready["message"] == "Secret key has no key 'apiKey'"
    wait_for(lambda: "SecretKeyNotFound" in chain.event_reasons("p"), what="event")
    chain.secret("key", apiKey="sk-now-the-right-key-456")
    chain.wait_condition("policy", "p", "Ready", "True", "CredentialsReady")


def policy_writes(audit_log: AuditLog, mark: int, namespace: str, name: str) -> list[Request]:
    """The controller's completed writes to policy ``namespace/name`` (its status) since
    ``mark`` — the namespace matters: earlier tests' policies of the same name may still be
    retrying while their namespaces are deleted."""
    return [
        r
        for r in audit_log.writes_since(mark)
        if r.resource == "backendsecuritypolicies" and r.namespace == namespace and r.name == name
    ]


def test_malformed_aws_file_backs_off_without_a_hot_loop(chain: Chain, audit_log: AuditLog) -> None:
    secret_text = "this is not an ini file: aws_secret_access_key=hunter2-super-secret"
    chain.secret("aws", credentials=secret_text)
    chain.remember("hunter2-super-secret")
    mark = audit_log.mark()
    created = time.time()
    chain.aws_file_policy("p", secret="aws", targets=["b"])
    ready = chain.wait_condition("policy", "p", "Ready", "False", "InvalidSecretData")
    assert "is not an AWS credentials file" in ready["message"]

    # No hot loop: retries on the documented schedule (1 s doubling, ±20 %; tests/support/
    # backoff.py). Attempt k cannot come sooner after creation than the schedule allows, so the
    # count read at any moment is bounded by the time since creation (hard: a loaded machine
    # only makes fewer attempts). Mutations caught: a constant 1 s retry delay, a zero delay.
    def failed_attempts() -> int:
        return int((chain.get("policy", "p") or {}).get("status", {}).get("failedAttempts", 0))

    wait_for(lambda: failed_attempts() >= 5, timeout=backoff.latest(5) + 30, what="four retries")
    counted, elapsed = failed_attempts(), time.time() - created  # the clock read after the count
    print(f"\n{counted} attempts {elapsed:.1f} s after the policy was created")
    assert counted <= backoff.most_attempts(elapsed), (
        f"{counted} attempts in {elapsed:.1f} s: the schedule allows "
        f"{backoff.most_attempts(elapsed)}"
    )
    # Positive control: the log holds a status write for every attempt seen so far, so the
    # upper bounds below are not met by an empty or unread log.
    seen = (chain.get("policy", "p") or {})["status"]["failedAttempts"]
    wait_for(
        lambda: len(policy_writes(audit_log, mark, chain.ns, "p")) >= seen,
        what="the controller's status writes in the audit log",
    )
    # Writes refused with 409 (computed from a cache one write behind, then retried on the new
    # state) change nothing; the bound is on the writes that landed.
    status_writes = [r for r in policy_writes(audit_log, mark, chain.ns, "p") if r.code < 400]
    attempts = (chain.get("policy", "p") or {})["status"]["failedAttempts"]
    assert len(status_writes) <= attempts + 1, f"one status write per attempt: {status_writes}"
    secret_reads = [
        r
        for r in audit_log.since(mark)
        if r.resource == "secrets"
        and r.namespace == chain.ns
        and r.name == "aws"
        and r.verb == "get"
    ]
    assert secret_reads, "positive control: the controller's read of the Secret is logged"
    assert len(secret_reads) <= 2, "the Secret's data is read once per resourceVersion"
    chain.secret(
        "aws",
        credentials="[default]\naws_access_key_id = AKIAFIXED\naws_secret_access_key = fixed-secret-value\n",
    )
    chain.remember("fixed-secret-value")
    chain.wait_condition("policy", "p", "Ready", "True", timeout=20)
    assert (chain.get("policy", "p") or {})["status"]["failedAttempts"] == 0


IAM_POLICY = {
    "type": "AWSCredentials",
    "awsCredentials": {
        "region": "us-east-1",
        "iamAccessKey": {"userName": "gateway", "secretRef": {"name": "admin"}},
    },
}


@pytest.mark.parametrize(
    "patch",
    [
        pytest.param(
            {"type": "APIKey", "apiKey": {"secretRef": {"name": "s"}}, "awsCredentials": None},
            id="to-api-key",
        ),
        pytest.param(
            {
                "awsCredentials": {
                    "iamAccessKey": None,
                    "oidcExchangeToken": {"oidc": OIDC, "awsRoleArn": ROLE},
                }
            },
            id="to-web-identity",
        ),
        pytest.param(
            {"awsCredentials": {"iamAccessKey": {"userName": "someone-else"}}},
            id="to-another-user",
        ),
    ],
)
def test_iam_key_policy_cannot_leave_its_keys_behind(
    api: clients.Client, namespace: str, installed: None, patch: dict[str, Any]
) -> None:
    """Keys rotator created are deleted with the policy; a spec that stopped naming the user
    would orphan live long-lived keys, so the API server refuses it."""
    create(api, namespace, rapi.POLICIES, IAM_POLICY)
    with pytest.raises(errors.Invalid) as raised:
        api.patch(rapi.POLICIES, "x", {"spec": patch}, namespace=namespace)
    assert "a policy that rotates IAM access keys keeps its type, source and userName" in str(
        raised.value
    )
    # Changes that keep the user are fine.
    changed = api.patch(
        rapi.POLICIES,
        "x",
        {"spec": {"awsCredentials": {"iamAccessKey": {"rotationInterval": "48h"}}}},
        namespace=namespace,
    )
    assert changed["spec"]["awsCredentials"]["iamAccessKey"]["rotationInterval"] == "48h"
