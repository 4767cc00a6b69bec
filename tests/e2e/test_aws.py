"""AWS credentials minted against moto (behind the STS proxy that checks tokens and shortens
sessions to 60 s), with a real OIDC issuer and the API server's TokenRequest."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import boto3
import botocore.config

from controllers.devenv.standins.oidc import OIDCIssuer
from controllers.devenv.standins.sts import ASSUME, STSProxy
from controllers.reconcilers import api as rapi
from controllers.runtime import clock as clocks
from tests.e2e.conftest import ROLE_ARN
from tests.support.chain import AWSChain
from tests.support.controller import ControllerProcess
from tests.support.history import SecretHistory
from tests.support.polling import wait_for

CLIENT_SECRET = "oidc-client-secret-do-not-log-4242"


def oidc_source(issuer: OIDCIssuer, client: str) -> dict[str, Any]:
    return {
        "oidcExchangeToken": {
            "oidc": {
                "issuer": issuer.issuer,
                "clientID": client,
                "clientSecretRef": {"name": "oidc-client"},
            },
            "awsRoleArn": ROLE_ARN,
        }
    }


def sa_source(service_account: str, role: str = ROLE_ARN) -> dict[str, Any]:
    return {"serviceAccountToken": {"serviceAccountName": service_account, "awsRoleArn": role}}


def caller(endpoint: str, keys: Any) -> str:
    sts = boto3.client(
        "sts",
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id=keys.access_key_id,
        aws_secret_access_key=keys.secret_access_key,
        aws_session_token=keys.session_token,
        config=botocore.config.Config(retries={"total_max_attempts": 1}),
    )
    return str(sts.get_caller_identity()["Arn"])


def web_identity_chain(chain: AWSChain, issuer: OIDCIssuer) -> None:
    client = f"client-{chain.ns}"
    issuer.register(client, CLIENT_SECRET)
    chain.secret("oidc-client", **{"client-secret": CLIENT_SECRET})
    chain.aws_policy("oidc", ["bedrock-oidc"], oidc_source(issuer, client))
    chain.aws_policy("sa", ["bedrock-sa"], sa_source("default"))
    for b in ("bedrock-oidc", "bedrock-sa"):
        chain.backend(b, schema="AWSBedrock", host="bedrock-runtime.us-east-1.amazonaws.com")
    chain.route("claude", ["bedrock-oidc", "bedrock-sa"], model="claude")


def test_web_identity_credentials_rotate_before_expiry_and_work(
    chain: AWSChain, oidc_issuer: OIDCIssuer, sts: STSProxy, moto: str
) -> None:
    with SecretHistory(chain.api, chain.ns) as history:
        web_identity_chain(chain, oidc_issuer)
        for policy in ("oidc", "sa"):
            chain.wait_condition("policy", policy, "Ready", "True", "CredentialsReady", timeout=60)
        for policy in ("oidc", "sa"):
            keys = chain.aws_keys(policy)
            assert keys is not None
            assert keys.session_token
            assert (
                caller(moto, keys)
                == f"arn:aws:sts::123456789012:assumed-role/bedrock/rotator.{chain.ns}.{policy}"
            )
        wait_for(
            lambda: all(history.count(p) >= 4 for p in ("oidc", "sa")),
            timeout=200,
            interval=0.5,
            what="three rotations each",
        )
        for policy in ("oidc", "sa"):
            versions = history.of(policy)
            for previous, following in itertools.pairwise(versions):
                assert previous.expires_at is not None
                margin = previous.expires_at - following.seen_at
                print(f"{policy}: replaced {margin:.1f} s before expiry")
                assert margin > 0, "replaced before it expired"
        status = (chain.get("policy", "oidc") or {})["status"]
        assert {"expirationTime", "renewalTime", "lastRotationTime"} <= set(status)
        assert status["failedAttempts"] == 0
        keys = chain.aws_keys("sa")
        assert keys is not None
        wait_for(
            lambda: (
                (chain.backend_credentials("claude").get("bedrock-sa") or {})
                .get("data", {})
                .get("credentials", "")
                .find(keys.access_key_id)
                >= 0
            ),
            what="route config carries the current session",
        )
        assert oidc_issuer.count("token") >= 1


def test_sts_outage_keeps_ready_while_valid_then_expires_then_recovers(
    chain: AWSChain, sts: STSProxy
) -> None:
    chain.aws_policy("sa", ["b"], sa_source("default"))
    chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=60)
    expires = chain.expiration("sa")
    assert expires is not None
    sts.set_mode("fail")
    try:
        failing = chain.wait_condition(
            "policy", "sa", "Ready", "True", "RotationFailed", timeout=60
        )
        assert "ServiceUnavailable" in failing["message"]
        assert time.time() < expires, "reported while the credential is still valid"
        expired = chain.wait_condition("policy", "sa", "Ready", "False", "Expired", timeout=60)
        late = time.time() - expires
        print(f"\nExpired reported {late:.1f} s after expiry: {expired['message']}")
        assert late < 5
        wait_for(lambda: "RotationFailed" in chain.event_reasons("sa"), what="RotationFailed event")
        ready = chain.condition("policy", "sa", "Ready") or {}
        next_retry = clocks.parse_rfc3339(ready["message"].rsplit("retrying at ", 1)[1])
    finally:
        sts.set_mode("ok")
    restored = time.time()
    chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=320)
    recovered = time.time()
    print(
        f"recovered {recovered - restored:.1f} s after STS returned; the next retry was due in {next_retry - restored:.1f} s"
    )
    assert recovered <= max(next_retry, restored) + 3, "recovers at the next backoff step"
    assert (chain.get("policy", "sa") or {})["status"]["failedAttempts"] == 0


def test_oidc_issuer_outage_keeps_ready_while_valid(
    chain: AWSChain, oidc_issuer: OIDCIssuer
) -> None:
    oidc_issuer.token_lifetime = 40  # the cached token will not outlive the session
    try:
        client = f"client-{chain.ns}"
        oidc_issuer.register(client, CLIENT_SECRET)
        chain.secret("oidc-client", **{"client-secret": CLIENT_SECRET})
        chain.aws_policy("oidc", ["b"], oidc_source(oidc_issuer, client))
        chain.wait_condition("policy", "oidc", "Ready", "True", "CredentialsReady", timeout=60)
        oidc_issuer.set_mode("fail")
        failing = chain.wait_condition(
            "policy", "oidc", "Ready", "True", "RotationFailed", timeout=60
        )
        assert "OIDC" in failing["message"]
        oidc_issuer.set_mode("ok")
        chain.wait_condition("policy", "oidc", "Ready", "True", "CredentialsReady", timeout=60)
    finally:
        oidc_issuer.set_mode("ok")
        oidc_issuer.token_lifetime = 300


def test_restart_reuses_valid_credentials_and_a_deleted_secret_is_restored(
    chain: AWSChain, sts: STSProxy, controller: ControllerProcess
) -> None:
    chain.aws_policy("sa", ["b"], sa_source("default"))
    chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=60)
    session = f"rotator.{chain.ns}.sa"
    before = chain.get("secret", "rotator-bsp-sa")
    calls = len(sts.calls_of(ASSUME, session))
    controller.restart()
    wait_for(controller.idle, what="settled after restart")
    assert len(sts.calls_of(ASSUME, session)) == calls, "no STS call for a still-valid credential"
    after = chain.get("secret", "rotator-bsp-sa")
    assert before is not None
    assert after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]

    chain.delete("secret", "rotator-bsp-sa")
    wait_for(
        lambda: chain.get("secret", "rotator-bsp-sa") is not None, what="derived Secret restored"
    )
    chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady")
    assert len(sts.calls_of(ASSUME, session)) == calls + 1


def test_rotation_can_be_requested(chain: AWSChain, sts: STSProxy) -> None:
    chain.aws_policy("sa", ["b"], sa_source("default"))
    chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=60)
    first = chain.aws_keys("sa")
    chain.api.patch(
        rapi.POLICIES,
        "sa",
        {"metadata": {"annotations": {rapi.ROTATE_REQUESTED_ANNOTATION: "now-1"}}},
        namespace=chain.ns,
    )
    wait_for(
        lambda: (
            (k := chain.aws_keys("sa")) is not None
            and first is not None
            and k.access_key_id != first.access_key_id
        ),
        what="rotated on request",
    )
    wait_for(lambda: "CredentialsRotated" in chain.event_reasons("sa"), what="event")


def test_rejected_role_is_reported_and_not_hammered(chain: AWSChain, sts: STSProxy) -> None:
    chain.aws_policy(
        "denied", ["b"], sa_source("default", role="arn:aws:iam::123456789012:role/not-trusted")
    )
    ready = chain.wait_condition(
        "policy", "denied", "Ready", "False", "ProviderRejected", timeout=60
    )
    assert "AccessDenied" in ready["message"]
    wait_for(lambda: "ProviderRejected" in chain.event_reasons("denied"), what="event")
    session = f"rotator.{chain.ns}.denied"
    first = sts.calls_of(ASSUME, session)[0].at
    wait_for(lambda: len(sts.calls_of(ASSUME, session)) >= 3, timeout=30, what="a few retries")
    calls = sts.calls_of(ASSUME, session)
    span = time.time() - first
    print(f"\n{len(calls)} AssumeRole calls in {span:.1f} s for a rejected role")
    assert len(calls) <= 2 + span, "backs off: no hot loop"


def test_fifty_simultaneous_policies_renew_spread_over_the_jitter_window(
    chain: AWSChain, sts: STSProxy
) -> None:
    names = [f"p{i:02d}" for i in range(50)]
    for name in names:
        chain.aws_policy(name, [], sa_source("default"))
    for name in names:
        chain.wait_condition("policy", name, "Ready", "True", timeout=120)

    def renewed(name: str) -> bool:
        return len(sts.calls_of(ASSUME, f"rotator.{chain.ns}.{name}")) >= 2

    wait_for(
        lambda: all(renewed(n) for n in names),
        timeout=120,
        interval=0.5,
        what="every policy renewed once",
    )
    offsets, renewals = [], []
    for name in names:
        first, second = sts.calls_of(ASSUME, f"rotator.{chain.ns}.{name}")[:2]
        offsets.append(second.at - first.at)
        renewals.append(second.at)
    spread = max(renewals) - min(renewals)
    jitter = max(offsets) - min(offsets)
    print(
        f"\n50 renewals spread over {spread:.1f} s; issue-to-renewal offsets span {jitter:.1f} s (min {min(offsets):.1f}, max {max(offsets):.1f})"
    )
    assert jitter >= 2.0, "renewals are jittered, not synchronised"
    assert max(offsets) < 60, "every one renewed before its 60 s session expired"


def test_iam_access_key_rotation_keeps_two_keys_at_most_and_cleans_up(
    chain: AWSChain, moto: str
) -> None:
    iam = boto3.client(
        "iam",
        region_name="us-east-1",
        endpoint_url=moto,
        aws_access_key_id="AKIAADMIN0000000",
        aws_secret_access_key="x",
    )
    user = f"gateway-{chain.ns}"
    arn = iam.create_user(UserName=user)["User"]["Arn"]
    chain.secret(
        "iam-admin",
        credentials="[default]\naws_access_key_id = AKIAADMIN0000000\naws_secret_access_key = admin-secret-value-123\n",
    )
    chain.aws_policy(
        "iam", ["b"], {"iamAccessKey": {"userName": user, "secretRef": {"name": "iam-admin"}}}
    )
    chain.wait_condition("policy", "iam", "Ready", "True", "CredentialsReady", timeout=60)
    policy = chain.get("policy", "iam")
    assert policy is not None
    assert rapi.FINALIZER_IAM_KEY in policy["metadata"]["finalizers"]

    def listed() -> list[str]:
        return sorted(
            k["AccessKeyId"] for k in iam.list_access_keys(UserName=user)["AccessKeyMetadata"]
        )

    most, invalid = 0, []
    stop = threading.Event()

    def watch() -> None:
        nonlocal most
        while not stop.wait(0.2):
            most = max(most, len(listed()))
            keys = chain.aws_keys("iam")
            if keys is not None and caller(moto, keys) != arn:
                invalid.append(keys.access_key_id)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        first = chain.aws_keys("iam")
        assert first is not None
        served = [first.access_key_id]
        assert listed() == served

        def rotated() -> bool:
            keys = chain.aws_keys("iam")
            return keys is not None and keys.access_key_id != served[-1]

        def only_served() -> bool:
            return listed() == [served[-1]]

        for request in ("first", "second"):
            chain.api.patch(
                rapi.POLICIES,
                "iam",
                {"metadata": {"annotations": {rapi.ROTATE_REQUESTED_ANNOTATION: request}}},
                namespace=chain.ns,
            )
            wait_for(rotated, what=f"rotation {request}")
            keys = chain.aws_keys("iam")
            assert keys is not None
            served.append(keys.access_key_id)
            assert keys.access_key_id in listed()
            wait_for(
                only_served, timeout=30, what="the replaced key retired after its grace period"
            )
    finally:
        stop.set()
        watcher.join()
    print(f"\nat most {most} keys at once; served keys: {served}")
    assert most <= 2
    assert invalid == [], "the served key always worked"
    chain.delete("policy", "iam")
    wait_for(lambda: chain.get("policy", "iam") is None, timeout=30, what="finalized and deleted")
    assert listed() == [], "deleting the policy deleted its key"


def test_credential_metrics_are_exported_and_dropped_with_the_policy(
    chain: AWSChain, controller: ControllerProcess
) -> None:
    chain.aws_policy("sa", ["b"], sa_source("default"))
    chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=60)
    labels = {"namespace": chain.ns, "name": "sa", "type": "AWSCredentials"}
    expires = chain.expiration("sa")
    wait_for(
        lambda: (
            controller.metric("rotator_credential_expiration_timestamp_seconds", **labels)
            == expires
        ),
        what="expiry gauge",
    )
    renewal = controller.metric("rotator_credential_renewal_timestamp_seconds", **labels)
    assert renewal is not None
    assert expires is not None
    assert renewal < expires - 20
    assert (
        controller.metric("rotator_rotations_total", type="AWSCredentials", result="success") or 0
    ) >= 1
    assert (
        controller.metric(
            "rotator_provider_requests_total",
            provider="aws-sts",
            call="AssumeRoleWithWebIdentity",
            code="200",
        )
        or 0
    ) >= 1
    assert (
        controller.metric(
            "rotator_provider_requests_total",
            provider="kubernetes-tokenrequest",
            call="TokenRequest",
            code="201",
        )
        or 0
    ) >= 1
    chain.delete("policy", "sa")
    wait_for(
        lambda: (
            controller.metric("rotator_credential_expiration_timestamp_seconds", **labels) is None
        ),
        what="series removed",
    )


def test_a_hanging_sts_does_not_delay_other_policies(chain: AWSChain, sts: STSProxy) -> None:
    sts.hang_seconds = 30
    sts.set_mode("hang")
    try:
        for i in range(10):
            chain.aws_policy(f"stuck{i}", [], sa_source("default"))
        received = sts.count("received")
        wait_for(lambda: sts.count("received") >= received + 4, what="STS calls hanging")
        started = time.time()
        chain.secret("key", apiKey="sk-isolation-test-value")
        chain.api_key_policy("fast", secret="key", targets=[])
        chain.wait_condition("policy", "fast", "Ready", "True", timeout=20)
        took = time.time() - started
        print(
            f"\nan API key policy became Ready in {took:.2f} s while 10 policies wait on a hanging STS"
        )
        assert took < 10
        failing = chain.wait_condition("policy", "stuck0", "Ready", "False", timeout=60)
        assert failing["reason"] == "ProviderUnavailable"
    finally:
        sts.set_mode("ok")
        sts.hang_seconds = 60
    chain.wait_condition("policy", "stuck9", "Ready", "True", timeout=120)
