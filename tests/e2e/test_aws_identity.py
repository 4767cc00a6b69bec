"""The controller's own AWS identity (``awsCredentials.controllerIdentity``) as the base of a role
chain, found by botocore's default chain through the variables EKS sets — never by a code path
of rotator's own:

* EKS Pod Identity: ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` pointing at the container
  credentials stand-in, which answers only the ``Authorization`` token written in
  ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE``;
* IRSA: ``AWS_WEB_IDENTITY_TOKEN_FILE`` holding a token the API server issued for the controller's
  ServiceAccount (audience ``sts.amazonaws.com``) and ``AWS_ROLE_ARN``, exchanged at the STS
  proxy, which verifies it against the cluster's keys.

Each test stops the shared controller and runs one with that environment and
``--controller-identity-namespaces`` (tenancy: only listed namespaces may use the identity),
then starts the shared one again. Sessions live 60 s (base and chained).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
from botocore.credentials import ContainerProvider
from botocore.utils import ContainerMetadataFetcher

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import objects
from rotator_devkit.devenv import manifests
from rotator_devkit.devenv.standins.container import ContainerCredentials
from rotator_devkit.devenv.standins.sts import ASSUME, ASSUME_ROLE, STSProxy
from tests.e2e.test_aws import LONGEST_RETRY, SLACK, caller, sa_source
from tests.support import leaks
from tests.support.chain import AWSChain
from tests.support.controller import SERVICE_ACCOUNT, ControllerProcess
from tests.support.history import SecretHistory
from tests.support.polling import wait_for

POD_IDENTITY_ROLE = "arn:aws:iam::123456789012:role/rotator-controller"
IRSA_ROLE = "arn:aws:iam::123456789012:role/rotator-controller-irsa"
IRSA_SESSION = "rotator-controller-irsa"
TARGET_ACCOUNT = "210987654321"
IDENTITY_CALLS = {
    "provider": "aws-identity",
    "call": "DefaultCredentialChain",
}


@pytest.fixture(scope="module")
def pod_identity(moto: str, sts: STSProxy) -> Iterator[ContainerCredentials]:
    """The EKS Pod Identity agent: sessions of the controller's role, in STS's keyring."""
    standin = ContainerCredentials(
        moto, role_arn=POD_IDENTITY_ROLE, keyring=sts.keyring, lifetime=60
    ).start()
    leaks.MINTED.add_source("the container credentials stand-in", standin.issued_values)
    yield standin
    standin.stop()


def target_role(chain: AWSChain) -> str:
    return f"arn:aws:iam::{TARGET_ACCOUNT}:role/bedrock-{chain.ns}"


def identity_source(role: str) -> dict[str, Any]:
    return {"controllerIdentity": {}, "assumeRole": {"roleArn": role}}


def pod_identity_env(standin: ContainerCredentials, folder: Path) -> dict[str, str]:
    return standin.environment(standin.write_token(folder / "eks-pod-identity-token"))


def irsa_env(api: clients.Client, sts: STSProxy, chain: AWSChain, folder: Path) -> dict[str, str]:
    """What the EKS IRSA webhook sets: a projected token of the controller's ServiceAccount
    (here one TokenRequest, as the kubelet makes) and the role to exchange it for."""
    token = api.create(
        objects.SERVICEACCOUNTS,
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": ["sts.amazonaws.com"], "expirationSeconds": 3600},
        },
        namespace=manifests.NAMESPACE,
        name=SERVICE_ACCOUNT,
        subresource="token",
    )["status"]["token"]
    chain.remember(token)
    sts.roles.add(IRSA_ROLE)
    path = folder / "irsa-token"
    path.write_text(token)
    return {
        "AWS_WEB_IDENTITY_TOKEN_FILE": str(path),
        "AWS_ROLE_ARN": IRSA_ROLE,
        "AWS_ROLE_SESSION_NAME": IRSA_SESSION,
    }


@contextlib.contextmanager
def identity_controller(
    shared: ControllerProcess, folder: Path, env: dict[str, str], namespaces: str
) -> Iterator[ControllerProcess]:
    """The controller with an identity in its environment, in place of the shared one."""
    shared.stop()
    process = ControllerProcess(
        shared.kubeconfig,
        folder,
        env={**shared.env, **env},
        args=(*shared.args, "--controller-identity-namespaces", namespaces),
        lease=shared.lease,
    )
    try:
        process.start()
        yield process
    finally:
        if process.proc is not None:
            process.stop()
        shared.start()


def base_calls(kind: str, pod: ContainerCredentials, sts: STSProxy) -> int:
    """Requests for the controller's own credentials: to the container endpoint, or STS."""
    return (
        pod.count("received") if kind == "pod-identity" else len(sts.calls_of(ASSUME, IRSA_SESSION))
    )


@pytest.mark.parametrize("kind", ["pod-identity", "irsa"])
def test_the_controller_identity_chain_rotates_before_expiry_and_is_the_target_role(
    kind: str,
    chain: AWSChain,
    sts: STSProxy,
    pod_identity: ContainerCredentials,
    controller: ControllerProcess,
    api: clients.Client,
    tmp_path: Path,
) -> None:
    role = target_role(chain)
    base_role = POD_IDENTITY_ROLE if kind == "pod-identity" else IRSA_ROLE
    sts.allow_assume(role, base_role)  # the target trusts this identity only
    env = (
        pod_identity_env(pod_identity, tmp_path)
        if kind == "pod-identity"
        else irsa_env(api, sts, chain, tmp_path)
    )
    before = base_calls(kind, pod_identity, sts)
    with (
        identity_controller(controller, tmp_path, env, chain.ns) as process,
        SecretHistory(chain.api, chain.ns) as history,
    ):
        chain.aws_policy("identity", ["bedrock"], identity_source(role))
        chain.backend(
            "bedrock", schema="AWSBedrock", host="bedrock-runtime.us-east-1.amazonaws.com"
        )
        chain.wait_condition("policy", "identity", "Ready", "True", "CredentialsReady", timeout=60)
        keys = chain.aws_keys("identity")
        assert keys is not None
        assert caller(sts, keys) == (
            f"arn:aws:sts::{TARGET_ACCOUNT}:assumed-role/bedrock-{chain.ns}/rotator.{chain.ns}.identity"
        )
        wait_for(
            lambda: history.count("identity") >= 4,
            timeout=200,
            interval=0.5,
            what="three rotations",
        )
        used = process.metric("rotator_provider_requests_total", **IDENTITY_CALLS, code="200")
        logs = process.logs()
    versions = history.of("identity")
    for previous, following in itertools.pairwise(versions):
        assert previous.expires_at is not None
        margin = previous.expires_at - following.seen_at
        print(f"{kind}: replaced {margin:.1f} s before expiry")
        assert margin > 0, "replaced before it expired"
    assert used is not None
    assert used >= 4, "the controller identity signed each chained session"
    assert base_calls(kind, pod_identity, sts) - before >= 4, "botocore refreshed the 60 s base"
    assert len(sts.calls_of(ASSUME_ROLE, f"rotator.{chain.ns}.identity")) >= 4
    assert chain.leaks(logs) == []


def failed_attempts(chain: AWSChain, policy: str) -> int:
    return int(((chain.get("policy", policy) or {}).get("status") or {}).get("failedAttempts", 0))


def test_an_unlisted_namespace_may_not_use_the_controller_identity(
    chain: AWSChain,
    sts: STSProxy,
    pod_identity: ContainerCredentials,
    controller: ControllerProcess,
    tmp_path: Path,
) -> None:
    """``Ready=False`` reason ``ControllerIdentityNotAllowed`` naming the flag, a Warning Event,
    and no call: neither the container endpoint nor STS hears of the policy, over retries. Then
    the operator lists the namespace (a restart with the flag) and the same policy works."""
    role = target_role(chain)
    sts.allow_assume(role, POD_IDENTITY_ROLE)
    env = pod_identity_env(pod_identity, tmp_path)
    session = f"rotator.{chain.ns}.identity"
    before = pod_identity.count("received")
    with identity_controller(controller, tmp_path, env, "someone-else,kube-system") as process:
        chain.aws_policy("identity", [], identity_source(role))
        refused = chain.wait_condition(
            "policy", "identity", "Ready", "False", "ControllerIdentityNotAllowed", timeout=60
        )
        print(f"\n{refused['message']}")
        assert "--controller-identity-namespaces" in refused["message"]
        assert chain.ns in refused["message"]
        wait_for(
            lambda: "ControllerIdentityNotAllowed" in chain.event_reasons("identity"),
            what="Warning Event",
        )
        wait_for(
            lambda: failed_attempts(chain, "identity") >= 3,
            timeout=30,
            what="refused again on retry",
        )
        assert pod_identity.count("received") == before, "the container endpoint was not called"
        assert sts.calls_of(ASSUME_ROLE, session) == [], "STS was not called"
        assert (
            process.metric("rotator_provider_requests_total", **IDENTITY_CALLS, code="200") is None
        )
        process.restart("--controller-identity-namespaces", f"kube-system,{chain.ns}")
        chain.wait_condition("policy", "identity", "Ready", "True", "CredentialsReady", timeout=60)
        logs = process.logs()
    assert len(sts.calls_of(ASSUME_ROLE, session)) >= 1
    assert chain.leaks(logs) == []


def test_container_endpoint_outage_keeps_ready_then_recovers_before_expiry(
    chain: AWSChain,
    sts: STSProxy,
    pod_identity: ContainerCredentials,
    controller: ControllerProcess,
    tmp_path: Path,
) -> None:
    """The endpoint answers 503 from the first renewal on: ``Ready`` stays True with reason
    ``RotationFailed`` (the message names botocore's error code, nothing of its body) while the
    session is valid, and the refresh is retried (botocore retries each attempt itself, three
    requests a second apart); when the endpoint is back, the next attempt — not a later one —
    renews, before the first session expired."""
    role = target_role(chain)
    sts.allow_assume(role, POD_IDENTITY_ROLE)
    env = pod_identity_env(pod_identity, tmp_path)
    with (
        identity_controller(controller, tmp_path, env, chain.ns) as process,
        SecretHistory(chain.api, chain.ns) as history,
    ):
        chain.aws_policy("identity", [], identity_source(role))
        chain.wait_condition("policy", "identity", "Ready", "True", "CredentialsReady", timeout=60)
        expires = chain.expiration("identity")
        assert expires is not None
        pod_identity.set_mode("fail")
        try:
            failing = chain.wait_condition(
                "policy", "identity", "Ready", "True", "RotationFailed", timeout=60
            )
            print(f"\n{failing['message']}")
            assert (
                "aws-identity DefaultCredentialChain failed: CredentialRetrievalError"
                in (failing["message"])
            )
            assert time.time() < expires, "reported while the session is still valid"
            wait_for(
                lambda: "RotationFailed" in chain.event_reasons("identity"), what="Warning Event"
            )
            wait_for(lambda: failed_attempts(chain, "identity") >= 2, what="retried with backoff")
            assert time.time() < expires, "retried while the session is still valid"
        finally:
            pod_identity.set_mode("ok")
        restored, served = time.time(), pod_identity.count("served")
        chain.wait_condition(
            "policy", "identity", "Ready", "True", "CredentialsReady", timeout=LONGEST_RETRY + SLACK
        )
        wait_for(lambda: history.count("identity") >= 2, what="the renewed session seen")
        logs = process.logs()
    renewed = history.of("identity")[1]
    print(
        f"renewed {renewed.seen_at - restored:.1f} s after the endpoint returned, "
        f"{expires - renewed.seen_at:.1f} s before the first session expired"
    )
    assert renewed.seen_at < expires, "recovered before expiry"
    assert pod_identity.count("served") - served == 1, "at the first attempt after it returned"
    assert pod_identity.count("failed") >= 3, "botocore asked (and retried) during the outage"
    assert chain.leaks(logs) == []


def test_a_restart_reuses_valid_chained_sessions_without_a_call(
    chain: AWSChain,
    sts: STSProxy,
    pod_identity: ContainerCredentials,
    controller: ControllerProcess,
    tmp_path: Path,
) -> None:
    """A chain on the controller identity and one on a ServiceAccount's session: after a
    restart, neither the container endpoint, nor STS (``AssumeRole``,
    ``AssumeRoleWithWebIdentity``) is called, and the derived Secrets are untouched."""
    role = target_role(chain)
    sts.allow_assume(role, POD_IDENTITY_ROLE, "arn:aws:iam::123456789012:role/bedrock")
    env = pod_identity_env(pod_identity, tmp_path)
    policies = ("identity", "sa")
    with identity_controller(controller, tmp_path, env, chain.ns) as process:
        chain.aws_policy("identity", [], identity_source(role))
        chain.aws_policy("sa", [], {**sa_source("default"), "assumeRole": {"roleArn": role}})
        for name in policies:
            chain.wait_condition("policy", name, "Ready", "True", "CredentialsReady", timeout=60)
        secrets = {n: chain.get("secret", rapi.derived_secret_name(n)) for n in policies}
        calls = (pod_identity.count("received"), len(sts.calls))
        process.restart()
        wait_for(process.idle, what="settled after restart")
        for name in policies:
            chain.wait_condition("policy", name, "Ready", "True", "CredentialsReady")
        assert (pod_identity.count("received"), len(sts.calls)) == calls, "no provider call"
        for name, before in secrets.items():
            after = chain.get("secret", rapi.derived_secret_name(name))
            assert before is not None
            assert after is not None
            assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        logs = process.logs()
    assert chain.leaks(logs) == []


def test_the_container_endpoint_answers_only_its_token(
    pod_identity: ContainerCredentials, tmp_path: Path
) -> None:
    """The stand-in verifies what the EKS Pod Identity agent verifies: botocore's own
    ``ContainerProvider``, given the variables with a wrong token file, is refused (and says
    nothing of the token); with the right one it gets the role's session."""
    right = pod_identity_env(pod_identity, tmp_path)
    wrong_file = tmp_path / "wrong-token"
    wrong_file.write_text("not-the-pod-token")
    wrong = {**right, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(wrong_file)}
    refused = pod_identity.count("refused")
    fetcher = ContainerMetadataFetcher(sleep=lambda _: None)
    with pytest.raises(botocore.exceptions.CredentialRetrievalError) as raised:
        ContainerProvider(environ=wrong, fetcher=fetcher).load()
    assert pod_identity.count("refused") - refused == ContainerMetadataFetcher.RETRY_ATTEMPTS
    assert pod_identity.token not in str(raised.value)
    served = pod_identity.count("served")
    credentials = ContainerProvider(environ=right, fetcher=fetcher).load()
    assert credentials is not None
    assert credentials.method == "container-role"
    assert pod_identity.count("served") == served + 1
    assert credentials.get_frozen_credentials().access_key == pod_identity.served_keys[-1]
