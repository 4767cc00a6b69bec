"""IAM access keys converge: whatever fails or is deleted, the user's keys are only those rotator
serves or is retiring (moto in server mode, the controller as its own process)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import errors, objects
from tests.support.chain import AWSChain
from tests.support.polling import wait_for

ADMIN_KEY = "AKIAADMIN0000000"
VAPS = objects.Resource(
    "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "VAP", False
)
VAP_BINDINGS = objects.Resource(
    "admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings", "VAPB", False
)


@dataclass
class IAMChain:
    chain: AWSChain
    user: str
    listed: Callable[[], list[str]]

    def served(self) -> str | None:
        keys = self.chain.aws_keys("iam")
        return None if keys is None else keys.access_key_id

    def only_served(self) -> bool:
        served = self.served()
        return served is not None and self.listed() == [served]


@pytest.fixture
def iam_chain(chain: AWSChain, moto: str) -> IAMChain:
    """An IAM key policy ``iam`` for a user of its own, Ready, its admin Secret ``iam-admin``."""
    iam = boto3.client(
        "iam",
        region_name="us-east-1",
        endpoint_url=moto,
        aws_access_key_id=ADMIN_KEY,
        aws_secret_access_key="x",
    )
    user = f"gateway-{chain.ns}"
    iam.create_user(UserName=user)
    chain.secret(
        "iam-admin",
        credentials=f"[default]\naws_access_key_id = {ADMIN_KEY}\n"
        "aws_secret_access_key = admin-secret-value-456\n",
    )
    chain.aws_policy(
        "iam", ["b"], {"iamAccessKey": {"userName": user, "secretRef": {"name": "iam-admin"}}}
    )
    chain.wait_condition("policy", "iam", "Ready", "True", "CredentialsReady", timeout=60)

    def listed() -> list[str]:
        return sorted(
            k["AccessKeyId"] for k in iam.list_access_keys(UserName=user)["AccessKeyMetadata"]
        )

    built = IAMChain(chain, user, listed)
    wait_for(built.only_served, what="one key, served")
    return built


def request_rotation(chain: AWSChain, value: str) -> None:
    chain.request_rotation("iam", value)


def test_the_management_secret_is_protected_while_the_policy_holds_keys(
    iam_chain: IAMChain,
) -> None:
    """``kubectl delete -f`` of the sample deletes the admin Secret first: it stays (in-use
    finalizer) until the policy has given its keys back, then goes."""
    chain = iam_chain.chain
    policy = chain.get("policy", "iam")
    assert policy is not None
    secret = chain.get("secret", "iam-admin")
    assert secret is not None
    protection = rapi.in_use_finalizer(policy["metadata"]["uid"])
    assert protection in secret["metadata"]["finalizers"]

    chain.delete("secret", "iam-admin")
    terminating = chain.get("secret", "iam-admin")
    assert terminating is not None, "the in-use finalizer holds the Secret"
    chain.delete("policy", "iam")
    wait_for(lambda: chain.get("policy", "iam") is None, timeout=30, what="the policy released")
    assert iam_chain.listed() == []
    wait_for(lambda: chain.get("secret", "iam-admin") is None, what="the Secret let go")


def test_namespace_deletion_gives_the_keys_back(iam_chain: IAMChain) -> None:
    chain = iam_chain.chain
    chain.api.delete(objects.NAMESPACES, chain.ns)
    wait_for(lambda: iam_chain.listed() == [], timeout=60, what="the keys deleted")

    def gone() -> bool:
        try:
            chain.api.get(objects.NAMESPACES, chain.ns)
        except errors.NotFound:
            return True
        return False

    wait_for(gone, timeout=90, what="the namespace deleted")


@pytest.fixture
def derived_writes_denied(iam_chain: IAMChain, api: clients.Client) -> Iterator[None]:
    """A ValidatingAdmissionPolicy refusing every write of the policy's derived Secret: a
    failure after ``CreateAccessKey``, from the real API server."""
    chain = iam_chain.chain
    name = f"deny-{chain.ns}"
    api.create(
        VAPS,
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["secrets"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "object.metadata.name != 'rotator-bsp-iam'",
                        "message": "writes of rotator-bsp-iam are refused by the test",
                    }
                ],
            },
        },
    )
    api.create(
        VAP_BINDINGS,
        {
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": chain.ns}}
                },
            },
        },
    )
    probe: dict[str, Any] = {"metadata": {"annotations": {"probe": "x"}}}

    def denied() -> bool:
        try:
            api.request(
                "PATCH",
                objects.SECRETS.path(namespace=chain.ns, name="rotator-bsp-iam"),
                query=[("dryRun", "All")],
                body=probe,
                content_type=str(clients.PatchType.MERGE),
            )
        except errors.ApiError:
            return True
        return False

    wait_for(denied, timeout=30, what="the admission policy in force (positive control)")
    try:
        yield
    finally:
        api.delete(VAP_BINDINGS, name)
        api.delete(VAPS, name)


def test_a_key_that_cannot_be_served_is_deleted_in_the_same_reconcile(
    iam_chain: IAMChain, derived_writes_denied: None
) -> None:
    """The derived Secret cannot be written after ``CreateAccessKey``: the new key is deleted
    at once, so the user holds only the served key however often the rotation is retried."""
    chain = iam_chain.chain
    served = iam_chain.served()
    assert served is not None
    request_rotation(chain, "while-denied")
    seen: set[str] = set()

    def attempts() -> bool:
        keys = iam_chain.listed()
        seen.update(keys)
        return len(seen) >= 3  # the served key and at least two created, then discarded

    wait_for(attempts, timeout=60, interval=0.02, what="two rotation attempts")
    wait_for(lambda: iam_chain.listed() == [served], what="only the served key left")
    assert iam_chain.served() == served


def test_a_deleted_derived_secret_leaves_no_key_behind(iam_chain: IAMChain) -> None:
    chain = iam_chain.chain
    old = iam_chain.served()
    chain.delete("secret", rapi.derived_secret_name("iam"))

    def replaced() -> bool:
        served = iam_chain.served()
        return served is not None and served != old

    wait_for(replaced, timeout=60, what="a new key served")
    wait_for(iam_chain.only_served, timeout=30, what="the forgotten key deleted")
    assert old not in iam_chain.listed()
